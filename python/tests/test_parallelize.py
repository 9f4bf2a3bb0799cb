"""loom.plan and loom.parallelize through the engine's bindings (_loom_engine, built beside $LOOM): the summary
and the rank programs of a plan, engine errors as loom.PlanError, and a GPT-2 trained by parallelize under
`loom run` (2 and 4 gloo processes) against torch's own AdamW training of the same module."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "python" / "loom" / "examples" / "parallelize_gpt2.py"
RTOL = 1e-5


def test_plan_summary_and_programs(engine):
    result = engine.plan(model="gpt3-125m", shrink=True, layers=2, dtype="f32", policy="megatron", dp=2, tp=2,
                         gpus=4)
    assert result.description == "megatron: dp 2 x tp 2 x pp 1"
    assert result.devices == 4 and result.degrees["dp"] == 2 and result.degrees["tp"] == 2
    assert result.step_time > 0 and 0 < result.mfu <= 1
    assert len(result.peak_memory) == 4 and all(b > 0 for b in result.peak_memory)
    assert result.out_of_memory is False
    programs = result.emit()
    manifest = json.loads(programs["manifest"])
    assert manifest["world_size"] == 4 and len(programs["modules"]) == 4
    assert all("def step(rt)" in text for text in programs["modules"])


def test_plan_writes_the_files_loom_plan_writes(engine, tmp_path):
    result = engine.plan(model="gpt3-125m", shrink=True, layers=2, dtype="f32", policy="dp", dp=2, gpus=2)
    names = sorted(pathlib.Path(p).name for p in result.write_files(str(tmp_path / "out")))
    assert names == ["exec.json", "plan.json", "report.html", "trace.json"]
    programs = sorted(pathlib.Path(p).name for p in result.write_programs(str(tmp_path / "emit")))
    assert programs == ["manifest.json", "rank_0.py", "rank_1.py"]
    assert (tmp_path / "emit" / "rank_1.py").read_text() == result.emit()["modules"][1]


def test_plan_takes_the_overlap(engine):
    result = engine.plan(model="gpt3-125m", shrink=True, tp=2, gpus=2, overlap="oases")
    assert result.degrees["overlap"] == "oases" and result.degrees["micro_batches"] == 1


def test_engine_errors_raise_plan_error(engine):
    with pytest.raises(engine.PlanError, match="unknown policy|policy 'nope'"):
        engine.plan(model="gpt3-125m", shrink=True, policy="nope")
    with pytest.raises(engine.PlanError, match="recompute"):
        engine.plan(model="gpt3-125m", shrink=True, recompute="sometimes")
    with pytest.raises(engine.PlanError, match="overlap"):
        engine.plan(model="gpt3-125m", shrink=True, tp=2, gpus=2, overlap="sometimes")
    with pytest.raises(engine.PlanError, match="tp is 1"):
        engine.plan(model="gpt3-125m", shrink=True, dp=2, gpus=2, overlap="oases")
    with pytest.raises(engine.PlanError, match="the graph JSON"):
        engine.plan(graph='{"format": "loom-graph", "version": 1, "tensors": [')


def test_parallelize_one_process_equals_torch(engine):
    """world_size 1 (no process group): parallelize's steps against torch.optim.AdamW in the same process."""
    import copy

    import torch
    import transformers

    from loom.examples.reference import torch_adamw_losses

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    reference = copy.deepcopy(model)
    batches = [{"input_ids": x, "labels": x} for x in (torch.randint(0, 64, (4, 16)) for _ in range(3))]
    optimizer = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    parallel = engine.parallelize(model, batches[0], policy="dp", world_size=1, optimizer=optimizer)
    assert parallel.plan.devices == 1
    before = parallel.state_dict()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    losses = [parallel.train_step(b) for b in batches]
    expected = torch_adamw_losses(reference, batches, optimizer)
    assert losses == pytest.approx(expected, rel=RTOL)
    trained = parallel.state_dict()
    assert sorted(trained) == sorted(reference.state_dict())
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(trained[name], value, rtol=1e-4, atol=1e-5, msg=name)
    with pytest.raises(ValueError, match="lacks the plan's inputs"):
        parallel.train_step({"input_ids": batches[0]["input_ids"]})


@pytest.mark.parametrize("policy, gpus, want", [
    ("megatron", 4, {"dp": 1, "tp": 4, "pp": 1}), ("dp-tp", 8, {"dp": 4, "tp": 2, "pp": 1}),
    ("dp", 4, {"dp": 4, "tp": 1, "pp": 1}), ("pp", 2, {"dp": 1, "tp": 1, "pp": 2, "micro_batches": 4}),
    ("dp", None, {"dp": 8, "tp": 1, "pp": 1})])
def test_plan_without_degrees_takes_the_policys_defaults(engine, policy, gpus, want):
    """The job's defaults (api/resolve_request.h), as the CLI's: without gpus, every GPU of the cluster."""
    result = engine.plan(model="gpt3-125m", shrink=True, layers=4, global_batch=8, dtype="f32", policy=policy,
                         gpus=gpus)
    assert {k: result.degrees[k] for k in want} == want
    assert result.devices == (gpus or 8)


def test_plan_derives_dp_as_megatron_does(engine):
    """dp = GPUs / (tp x pp), micro-batches from the micro-batch size; GPUs left unused are an error."""
    result = engine.plan(model="gpt3-125m", shrink=True, layers=4, dtype="f32", policy="megatron", tp=2, pp=2,
                         global_batch=16, micro_batch_size=2)
    assert result.degrees == {**result.degrees, "dp": 2, "tp": 2, "pp": 2, "micro_batches": 4}
    with pytest.raises(engine.PlanError, match="4 left unused"):
        engine.plan(model="gpt3-125m", shrink=True, policy="megatron", dp=2, tp=2)


def test_plan_rejects_unknown_and_mistyped_keywords(engine):
    with pytest.raises(TypeError, match="unexpected keyword 'microbatches'"):
        engine.plan(model="gpt3-125m", shrink=True, microbatches=4)
    with pytest.raises(TypeError, match="keyword dp takes an int, not str"):
        engine.plan(model="gpt3-125m", shrink=True, dp="2")
    with pytest.raises(TypeError, match="keyword shrink takes a bool"):
        engine.plan(model="gpt3-125m", shrink=1)
    with pytest.raises(engine.PlanError, match="keyword zero: 4 is outside"):
        engine.plan(model="gpt3-125m", shrink=True, zero=4)


def test_keywords_are_the_cli_flags(engine):
    """One keyword table: every field the engine takes from Python, with the CLI's defaults."""
    import _loom_engine

    table = _loom_engine.keywords()
    assert {"model", "graph", "graph_file", "global_batch", "gpus", "dp", "tp", "pp", "micro_batches",
            "micro_batch_size", "zero", "recompute", "lr"} <= set(table)
    assert table["cluster"][0] == "dgx-a100" and table["policy"][0] == "megatron"


def test_a_traced_graph_takes_the_baselines_search(engine):
    """policy="megatron-best" searches Megatron-LM's space for the traced graph (parallelize takes it too)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    ids = torch.randint(0, 64, (8, 16))
    graph = engine.trace(transformers.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids})
    result = engine.plan(graph=graph, policy="megatron-best", gpus=4, fold="off")
    assert result.description.startswith("megatron-best -> megatron: ")
    assert result.devices == 4 and len(result.emit()["modules"]) == 4


def test_a_traced_graph_takes_auto(engine):
    """policy="auto" searches the whole space (docs/search.md) for the traced graph, within a budget, and its
    plan is never slower than the baselines' on the same simulator."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    ids = torch.randint(0, 64, (8, 16))
    graph = engine.trace(transformers.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids})
    result = engine.plan(graph=graph, policy="auto", gpus=4, budget=60)
    assert result.description.startswith("auto -> ")
    assert result.devices == 4 and len(result.emit()["modules"]) == 4
    for baseline in ("megatron-best", "deepspeed-best"):
        assert result.step_time <= engine.plan(graph=graph, policy=baseline, gpus=4).step_time


def test_plan_without_degrees_refuses_what_the_policy_cannot_lay_out(engine):
    with pytest.raises(engine.PlanError, match="dp-tp needs an even device count"):
        engine.plan(model="gpt3-125m", shrink=True, policy="dp-tp", gpus=3)


def test_parallelize_checks_the_degrees(engine):
    import torch

    with pytest.raises(ValueError, match="product is the world size"):
        engine.parallelize(torch.nn.Linear(2, 2), {"input": torch.zeros(1, 2)}, dp=2)


@pytest.mark.parametrize("nproc, script_args", [(2, ["--tp", "1"]), (4, [])], ids=["dp2", "dp2xtp2"])
def test_loom_run_parallelize_gpt2_equals_torch(engine, loom_binary, nproc, script_args):
    run = subprocess.run([loom_binary, "run", str(EXAMPLE), "--nproc", str(nproc), "--", *script_args, "--steps", "5"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    line = next(x for x in run.stdout.splitlines() if x.startswith("LOSSES "))
    result = json.loads(line[len("LOSSES "):])
    assert len(result["loom"]) == 5
    for step, (got, want) in enumerate(zip(result["loom"], result["torch"]), start=1):
        assert got == pytest.approx(want, rel=RTOL), f"step {step}: loom {got}, torch {want}"
    # state_dict gathers the trained weights: within rounding noise of torch's (Adam moves them ~lr = 1e-3 a step).
    assert result["weights_max_abs_diff"] < 5e-5


def test_plan_groups_take_the_default_groups_timeout():
    # In a child process: init_process_group is process-wide state.
    code = ("import datetime, torch, torch.distributed as dist\n"
            "from loom.api import default_group_timeout\n"
            "assert default_group_timeout(torch.device('cpu')) is None\n"
            "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1,\n"
            "                        timeout=datetime.timedelta(seconds=77))\n"
            "print(default_group_timeout(torch.device('cpu')).total_seconds())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == "77.0"
