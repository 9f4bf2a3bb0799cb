"""Generated per-rank programs train exactly as one device: `loom plan --shrink --emit` writes the rank
modules of a plan (dp, tp, dp x tp with Megatron's vocabulary-parallel embedding and loss, a 1F1B pipeline,
ZeRO-1 and ZeRO-3), loom.runtime runs them on gloo processes, and the loss and every updated parameter and
optimizer state equal what the single-device plan's program computes from the same initial values
(float32, tensor-wise max |difference| / max(max |reference|, 1e-6) <= 1e-5)."""

import pytest
import torch
from conftest import HF_ROUTES, emit_shrunk, loom_runner

from loom.runtime import programs
from loom.runtime.launch import LaunchError, launch

RTOL = 1e-5
# As `loom verify`: relative to max(max |reference|, FLOOR), so a tensor whose exact value is zero (the key
# bias's gradient: softmax ignores a shift shared by all keys) is compared by its rounding noise's size.
FLOOR = 1e-6
MODELS = ["gpt3-125m", "llama3-8b"]
PLANS = {
    "dp2": ["--policy", "dp", "--dp", "2", "--gpus", "2"],
    "tp2": ["--policy", "tp", "--tp", "2", "--gpus", "2"],
    "dp2xtp2": ["--policy", "megatron", "--dp", "2", "--tp", "2", "--gpus", "4"],
    "pp2-1f1b": ["--policy", "megatron", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--gpus", "2"],
    "zero1": ["--policy", "zero", "--dp", "2", "--zero", "1", "--gpus", "2"],
    "zero3": ["--policy", "zero", "--dp", "2", "--zero", "3", "--gpus", "2"],
}
# Model x plan; T5 adds an encoder-decoder with causal attention under a relative-position bias.
CASES = [(model, plan) for model in MODELS for plan in PLANS] + [("t5-3.9b", "dp2xtp2")]


@pytest.fixture(scope="module")
def single_device(tmp_path_factory, loom_binary):
    run_loom = loom_runner(loom_binary)
    values = {}
    for model in sorted({model for model, _ in CASES}):
        directory = emit_shrunk(run_loom, tmp_path_factory.mktemp(f"{model}-single"), model, ["--policy", "dp", "--dp", "1", "--gpus", "1"])
        values[model] = launch(directory)
    return values


# AdamW's step (lr 1e-4, the engine's default) moves an element by lr x m / sqrt(v) whatever the gradient's size:
# where the exact gradient is zero (the key bias), the sign of float rounding noise decides the update, so a
# parameter element whose first moment is tiny (|m| <= TINY max |m| of its tensor) is held to Adam's bound,
# 2 lr, instead of RTOL; how float32 rounds depends on the CPU's vector width.
ADAM_LR = 1e-4
TINY = 1e-4


def tiny_moment(reference, name):
    """For a parameter's updated value: the elements whose first moment is tiny; else None."""
    if not name.endswith(".updated") or name.endswith((".exp_avg.updated", ".exp_avg_sq.updated")):
        return None
    moment = reference.get(name.removesuffix(".updated") + ".exp_avg.updated")
    if moment is None:
        return None
    moment = moment.double().abs()
    return moment <= TINY * moment.max()


def worst_error(reference, candidate):
    """(max abs, max rel, tensor) over every tensor, rel = max |diff| / max(max |reference|, FLOOR) per tensor;
    tiny-moment parameter elements count in rel only where they pass Adam's bound."""
    worst = (0.0, 0.0, "")
    for name, want in reference.items():
        got = candidate[name].double()
        want = want.double()
        diffs = (got - want).abs()
        tiny = tiny_moment(reference, name)
        if tiny is not None:
            diffs = diffs.masked_fill(tiny & (diffs <= 2 * ADAM_LR), 0.0)
        diff = diffs.max().item()
        rel = diff / max(want.abs().max().item(), FLOOR)
        worst = (max(diff, worst[0]), *((rel, name) if rel >= worst[1] else worst[1:]))
    return worst


def expect_trains_alike(label, reference, values):
    """The same tensors come back, every parameter and optimizer state with them, within RTOL of the reference."""
    assert sorted(values) == sorted(reference)
    updated = [n for n in reference if n.endswith(".updated")]
    assert len(updated) >= 20, "every parameter and its optimizer states come back"
    loss_rel = abs(values["loss"].item() - reference["loss"].item()) / abs(reference["loss"].item())
    max_abs, max_rel, where = worst_error(reference, values)
    print(f"{label}: loss {values['loss'].item():.8g} (rel {loss_rel:.2e}); max abs {max_abs:.2e}; "
          f"worst rel {max_rel:.2e} ({where})")
    assert loss_rel <= RTOL
    assert max_rel <= RTOL, f"{where}: relative error {max_rel:.3e}"


@pytest.mark.parametrize(("model", "plan"), CASES)
def test_plan_trains_as_one_device(model, plan, single_device, run_loom, tmp_path):
    values = launch(emit_shrunk(run_loom, tmp_path, model, PLANS[plan]), timeout=120)
    expect_trains_alike(f"{model} {plan}", single_device[model], values)


EAGER_PLANS = {**PLANS, "tp2-coshard2": ["--policy", "megatron", "--tp", "2", "--coshard", "2", "--gpus", "2"],
               # Megatron-LM's selective recompute: the core attention (scores to context) runs again in backward
               "tp2xpp2-selective": ["--policy", "megatron", "--tp", "2", "--pp", "2", "--microbatches", "2",
                                     "--recompute", "selective", "--gpus", "4"]}


@pytest.mark.parametrize("form", ["eager", "eager-fp32"])
@pytest.mark.parametrize("plan", ["tp2", "dp2xtp2", "tp2-coshard2", "tp2xpp2-selective"])
def test_eager_attention_trains_as_one_device(form, plan, run_loom, tmp_path):
    """GPT with eager attention (`--attention eager`: q k^T, causal mask, softmax, dropout and the product with v
    as ops, split by heads over tp, and into recomputed parts by coshard) trains as the single-device program of
    the same graph; so does `--attention eager-fp32` (Megatron-LM's softmax path above 4096 keys: in float32 it
    casts nothing, and query-key layer scaling moves the layer number from q's scale to the scores)."""
    eager = ["--attention", form]
    reference = launch(emit_shrunk(run_loom, tmp_path / "single", "gpt3-125m",
                                   [*eager, "--policy", "dp", "--dp", "1", "--gpus", "1"]))
    values = launch(emit_shrunk(run_loom, tmp_path / plan, "gpt3-125m", [*eager, *EAGER_PLANS[plan]]), timeout=120)
    expect_trains_alike(f"gpt3-125m {form} {plan}", reference, values)


def test_other_seed_differs(single_device, tmp_path, run_loom):
    # The comparison has teeth: a different seed gives different initial values, so different results.
    values = launch(emit_shrunk(run_loom, tmp_path, "gpt3-125m", ["--policy", "dp", "--dp", "1", "--gpus", "1"]), seed=2)
    assert worst_error(single_device["gpt3-125m"], values)[1] > 1e-2


def test_crashed_rank_stops_the_job_naming_it(run_loom, tmp_path):
    directory = emit_shrunk(run_loom, tmp_path, "gpt3-125m", PLANS["dp2"])
    module = directory / "rank_1.py"
    text = module.read_text().replace("def step(rt):\n", "def step(rt):\n    raise ValueError('boom in rank one')\n", 1)
    module.write_text(text)
    programs.restamp(directory)
    with pytest.raises(LaunchError, match=r"rank 1 failed: ValueError: boom in rank one"):
        launch(directory, timeout=60)


def test_folded_plan_is_refused(run_loom, tmp_path):
    result = run_loom("plan", "--model", "gpt3-125m", "--layers", "2", "--dtype", "f32", "--shrink", "--policy",
                      "megatron", "--dp", "2", "--gpus", "2", "--fold", "on", "--out", str(tmp_path / "out"), "--emit",
                      str(tmp_path / "emit"))
    assert result.returncode != 0
    assert "--fold off" in result.stderr


def test_launch_without_manifest_names_the_fix(tmp_path):
    with pytest.raises(LaunchError, match="--emit"):
        launch(tmp_path)


@pytest.mark.parametrize("capture", HF_ROUTES)
def test_traced_transformers_gpt2_trains_as_one_device(capture, run_loom, tmp_path):
    # From a torch.nn.Module to per-rank programs: trace, plan with --graph, emit, run on 2 gloo processes.
    transformers = pytest.importorskip("transformers")
    import loom

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
    ids = torch.randint(0, 128, (4, 16))
    loom.save_graph(loom.trace(transformers.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids},
                               capture=capture), tmp_path / "gpt2.json")
    values = {}
    for name, policy in {"single": ["--dp", "1", "--gpus", "1"], "dp2": ["--dp", "2", "--gpus", "2"]}.items():
        result = run_loom("plan", "--graph", str(tmp_path / "gpt2.json"), "--policy", "dp", *policy, "--out",
                          str(tmp_path / name / "out"), "--emit", str(tmp_path / name / "emit"))
        assert result.returncode == 0, result.stdout + result.stderr
        values[name] = launch(tmp_path / name / "emit", timeout=120)
    loss = next(n for n in values["single"] if not n.endswith(".updated"))
    max_abs, max_rel, where = worst_error(values["single"], values["dp2"])
    print(f"traced gpt2 dp2: loss {values['dp2'][loss].item():.8g}; max abs {max_abs:.2e}; worst rel {max_rel:.2e} "
          f"({where})")
    assert max_rel <= RTOL, f"{where}: relative error {max_rel:.3e}"


def test_collectives_place_by_boxes_whatever_the_member_order(single_device, run_loom, tmp_path):
    # The ExecPlan lists a collective's members in piece order, torch in rank order: reverse every group
    # (and its pieces) of a ZeRO-1 program (all-gathers, reduce-scatters) and the step still ends the same.
    import ast

    directory = emit_shrunk(run_loom, tmp_path, "gpt3-125m", PLANS["zero1"])
    reversed_calls = 0
    for path in directory.glob("rank_*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
                for keyword in node.keywords:
                    if keyword.arg in ("group", "ins", "outs"):
                        keyword.value.elts.reverse()
                reversed_calls += 1
        path.write_text(ast.unparse(tree))
    programs.restamp(directory)
    assert reversed_calls > 0
    assert worst_error(single_device["gpt3-125m"], launch(directory, timeout=120))[1] <= RTOL
