"""The runtime's record of each rank's peak memory (loom/runtime/memory.py): storages counted once however many
views are returned, released when their last tracked holder goes; and on real plans, each rank's peak beside
the memory model's (`loom plan --json`, per_device peak_bytes) within 15 %."""

import json
import weakref

import pytest
import torch

from loom.runtime.launch import read_timing, train
from loom.runtime.memory import LiveBytes


def test_live_bytes_counts_each_storage_once_until_its_last_holder_goes():
    counted = LiveBytes()
    a = torch.zeros(256)  # 1 KiB
    b = torch.zeros(512)  # 2 KiB
    counted.add(a)
    counted.add((a.view(16, 16), b))  # a view of a's storage adds nothing
    assert counted.live == 3072 and counted.peak == 3072
    counted.add(a)  # the same tensor again: still once
    del b
    assert counted.live == 1024 and counted.peak == 3072
    c = torch.zeros(128)
    counted.add([c])
    assert counted.live == 1536 and counted.peak == 3072
    del a  # its view went already: the storage goes with a
    assert counted.live == 512


def test_attention_keeps_nothing_once_the_program_drops_its_inputs():
    """The fused attention's cache (forms/attention.py) holds a forward's output for its backward only while the
    program holds the forward's inputs: a recomputed forward's first run, whose backward reads the
    recomputation's tensors, must not keep its q, k, v and output alive past the plan's `del`."""
    from loom.runtime.forms.attention import ATTENTION_SAVED, attention_keeping_logsumexp

    ATTENTION_SAVED.clear()
    q, k, v = (torch.randn(2, 2, 8, 4) for _ in range(3))
    with torch.no_grad():  # as the runtime runs forwards
        out = attention_keeping_logsumexp(q, k, v, True, None)
    assert len(ATTENTION_SAVED) == 1
    watched = [weakref.ref(x) for x in (q, k, v, out)]
    del out, q  # the program's `del`s; k and v go with q's entry, not with the cache
    assert not ATTENTION_SAVED
    del k, v
    assert all(w() is None for w in watched)


@pytest.mark.parametrize("policy", [["--policy", "dp", "--gpus", "2"], ["--tp", "2", "--gpus", "2"],
                                    ["--policy", "zero", "--zero", "3", "--gpus", "2"],
                                    ["--tp", "2", "--gpus", "2", "--recompute", "full"]],
                         ids=["dp2", "tp2", "zero3", "tp2-recompute"])
def test_peak_per_rank_matches_the_memory_model(tmp_path, run_loom, policy):
    result = run_loom("plan", "--model", "gpt3-125m", "--layers", "2", "--dtype", "f32", "--shrink", *policy,
                      "--fold", "off", "--json", "--emit", str(tmp_path / "emit"))
    assert result.returncode == 0, result.stdout + result.stderr
    predicted = [d["peak_bytes"] for d in json.loads(result.stdout)["summary"]["per_device"]]
    train(tmp_path / "emit", 2, timed=True)
    measured = [rank["peak_bytes"] for rank in read_timing(tmp_path / "emit" / "results")]
    assert len(measured) == len(predicted)
    for m, p in zip(measured, predicted):
        assert m > 0 and abs(p - m) / m <= 0.15, (measured, predicted)
