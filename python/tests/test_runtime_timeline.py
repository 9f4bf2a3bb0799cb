"""The runtime's timeline (runtime/timeline.py): when each instruction of the last step ran, and how much of
the collectives' time had compute beside it (issue 14: the runtime really overlaps)."""

import random

import pytest
from conftest import emit_shrunk, loom_runner

from loom.runtime.launch import read_timing, train
from loom.runtime.timeline import COLLECTIVES, overlap


def brute_force_overlap(spans, grid=20000, horizon=1.0):
    """The same quantity on a time grid: per collective, the grid points inside it also inside a compute."""
    dt = horizon / grid
    computes = [(s, e) for kind, s, e in spans if kind.startswith("compute")]
    total = beside = 0.0
    for kind, start, end in spans:
        if kind not in COLLECTIVES:
            continue
        total += end - start
        for i in range(grid):
            t = (i + 0.5) * dt
            if start <= t < end and any(cs <= t < ce for cs, ce in computes):
                beside += dt
    return total, beside


def test_overlap_is_the_compute_inside_the_collectives_on_random_spans():
    rng = random.Random(7)
    for _ in range(60):
        spans = []
        t = 0.0
        for _ in range(rng.randint(1, 6)):  # one rank's host: compute spans one after another
            d = rng.uniform(0.01, 0.15)
            spans.append(("compute forward", t, t + d))
            t += d + rng.uniform(0.0, 0.05)
        for _ in range(rng.randint(1, 4)):  # collectives issued anywhere, ending up to 0.3 s later
            s = rng.uniform(0.0, 0.6)
            spans.append((rng.choice(["all_reduce_start", "all_gather_start", "all_reduce"]), s, s + rng.uniform(0, 0.3)))
        result = overlap(spans)
        total, beside = brute_force_overlap(spans)
        assert result["collective_s"] == pytest.approx(total)
        assert result["compute_beside_s"] == pytest.approx(beside, abs=2e-4 * len(spans))
        assert 0.0 <= result["ratio"] <= 1.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory, loom_binary):
    root = tmp_path_factory.mktemp("timeline")
    run = loom_runner(loom_binary)
    base = ["--policy", "megatron", "--tp", "2", "--gpus", "2"]
    return {name: emit_shrunk(run, root / name, "gpt3-125m", base + ["--overlap", name])
            for name in ("none", "oases")}


def timelines(directory, out):
    train(directory, 2, timeout=60, out=out, timed=True)
    return [rank["timeline"] for rank in read_timing(out)]


def test_blocking_collectives_have_no_compute_beside_them(pair, tmp_path):
    for spans in timelines(pair["none"], tmp_path / "none"):
        kinds = {kind for kind, _, _ in spans}
        assert "all_reduce" in kinds and not kinds & {"all_reduce_start", "all_gather_start"}
        assert all(0.0 <= s <= e for _, s, e in spans)
        assert overlap(spans)["compute_beside_s"] == 0.0  # one host thread: a blocking call holds it


def test_overlapped_collectives_are_spans_from_issue_to_completion(pair, tmp_path):
    for spans in timelines(pair["oases"], tmp_path / "oases"):
        starts = [(s, e) for kind, s, e in spans if kind == "all_reduce_start"]
        waits = [(s, e) for kind, s, e in spans if kind == "wait"]
        assert starts and len(starts) == len(waits)
        assert all(0.0 <= s <= e for s, e in starts)
        # each collective ends by the end of the wait that reads it: its span covers the time it was in flight
        assert max(e for _, e in starts) <= max(e for _, e in waits) + 1e-3
        assert overlap(spans)["collective_s"] > 0.0
