"""ZeRO-Offload trains as one device: `loom plan --offload` emits programs whose optimizer states live in host
memory, whose steps run there on gradient shards copied to the host, and whose updated shards are copied back
(exec/passes.h, offload_to_host). On gloo (CPU) the copies are clones; 3 steps on 2 processes must end where the
single-device program ends (loss of every step and every updated parameter and state, rtol 1e-5)."""

import pytest
from conftest import emit_shrunk
from test_runtime_equivalence import RTOL, worst_error

from loom.runtime.launch import train

STEPS = 3
PLANS = {
    "zero3-optimizer": ["--policy", "zero", "--dp", "2", "--zero", "3", "--gpus", "2", "--offload", "optimizer"],
    "zero3-optimizer+params": ["--policy", "zero", "--dp", "2", "--zero", "3", "--gpus", "2", "--offload",
                               "optimizer+params"],
    "zero1-optimizer": ["--policy", "zero", "--dp", "2", "--zero", "1", "--gpus", "2", "--offload", "optimizer"],
}


@pytest.fixture(scope="module")
def single_device(tmp_path_factory, loom_binary):
    from conftest import loom_runner

    directory = emit_shrunk(loom_runner(loom_binary), tmp_path_factory.mktemp("single"), "gpt3-125m",
                            ["--policy", "dp", "--dp", "1", "--gpus", "1"])
    return train(directory, STEPS, timeout=120)


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_offloaded_plan_trains_as_one_device(plan, single_device, run_loom, tmp_path):
    directory = emit_shrunk(run_loom, tmp_path, "gpt3-125m", PLANS[plan])
    program = (directory / "rank_0.py").read_text()
    assert "rt.to_host(" in program and "host=True" in program  # the plan really offloads
    if plan.endswith("params"):
        assert "rt.to_device(" in program
    losses, values = train(directory, STEPS, timeout=120)
    want_losses, want = single_device
    assert len(losses) == STEPS
    for got, expected in zip(losses, want_losses):
        assert abs(float(got) - float(expected)) <= RTOL * abs(float(expected))
    max_abs, max_rel, where = worst_error(want, values)
    print(f"gpt3-125m {plan}: {STEPS} steps, max abs {max_abs:.2e}, worst rel {max_rel:.2e} ({where})")
    assert sorted(values) == sorted(want)
    assert max_rel <= RTOL, f"{where}: relative error {max_rel:.3e}"
