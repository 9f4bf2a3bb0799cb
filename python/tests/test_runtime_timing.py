"""train(..., timed=True) (the hook bench/python/bench_ddp.py reads): per rank, the wall seconds of every
step and, per instruction kind (and per compute kind and op type), the calls and seconds of the steps after
the first; the counts match the generated program's statements and timing changes no result."""

import re

import torch
from conftest import emit_shrunk

from loom.runtime.launch import read_timing, train

STEPS = 3


def test_timing_counts_every_instruction_of_the_later_steps(tmp_path, run_loom):
    directory = emit_shrunk(run_loom, tmp_path, "gpt3-125m", ["--policy", "dp", "--dp", "2", "--gpus", "2"])
    plain_losses, plain = train(directory, STEPS, out=tmp_path / "plain")
    losses, values = train(directory, STEPS, out=tmp_path / "timed", timed=True)
    assert losses == plain_losses
    assert all(torch.equal(values[k], plain[k]) for k in plain)
    timing = read_timing(tmp_path / "timed")
    assert len(timing) == 2
    for rank, entry in enumerate(timing):
        assert len(entry["step_s"]) == STEPS and all(s > 0 for s in entry["step_s"])
        program = (directory / f"rank_{rank}.py").read_text()
        kinds = {k: v for k, v in entry["kinds"].items() if ": " not in k}
        by_op = {k: v for k, v in entry["kinds"].items() if ": " in k}
        calls = {k: c for k, (_, c) in kinds.items()}
        computes = len(re.findall(r"rt\.compute\(", program))
        assert sum(c for k, c in calls.items() if k.startswith(("compute", "backward", "optimizer"))) == \
            computes * (STEPS - 1)
        assert calls.get("all_reduce", 0) == len(re.findall(r"rt\.all_reduce\(", program)) * (STEPS - 1)
        assert calls["load"] == len(re.findall(r"rt\.load\(", program)) * (STEPS - 1)
        assert calls["compute forward"] > 0 and calls["backward autograd"] > 0 and calls["optimizer (adamw)"] > 0
        assert sum(c for _, c in by_op.values()) == computes * (STEPS - 1)  # each compute once by op type
        compute_kinds = {k for k in calls if k.startswith(("compute", "backward", "optimizer"))}
        assert {k.split(": ")[0] for k in by_op} == compute_kinds
        assert sum(s for s, _ in kinds.values()) <= sum(entry["step_s"][1:])
