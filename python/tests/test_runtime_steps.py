"""Several training steps train exactly as one device: each step loads what the previous one updated (the
plan's step closing leaves it where the next step loads it) and a new batch, and after 3 AdamW steps of dp 2,
tp 2, dp 2 x tp 2 and a 1F1B pipeline of 2 stages (1 step of AlphaFold2's 3F1B pipeline of 2 stages against
one device accumulating the same micro-batches, REFERENCE) the loss of every step and every parameter and
optimizer state equal the single-device run's (float32, rtol 1e-5 as test_runtime_equivalence measures)."""

import pytest
import torch
from conftest import emit_shrunk, loom_runner

from loom.runtime.initial import initial_value
from loom.runtime.launch import LaunchError, train
from loom.runtime.forms import build

RTOL = 1e-5
FLOOR = 1e-6
STEPS = 3
PLANS = {
    "dp2": ["--policy", "dp", "--dp", "2", "--gpus", "2"],
    "tp2": ["--policy", "tp", "--tp", "2", "--gpus", "2"],
    "dp2xtp2": ["--policy", "megatron", "--dp", "2", "--tp", "2", "--gpus", "4"],
    "pp2-1f1b": ["--policy", "megatron", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--gpus", "2"],
    # nnScaler's 3F1B: AlphaFold2's recycled pass and the last one pipelined by layer (docs/schedules.md).
    "pp2-3f1b": ["--policy", "megatron", "--pp", "2", "--microbatches", "4", "--schedule", "3f1b", "--gpus", "2"],
}
CASES = ([("gpt3-125m", plan) for plan in PLANS if plan != "pp2-3f1b"] + [("llama3-8b", "dp2xtp2")] +
         [("alphafold2-87m", "pp2-3f1b")])
# AlphaFold2 in float32 is ill-conditioned for this check, whatever the plan: its pair-bias weights' gradients
# (about 2e-5 where others reach 0.3) come out of large cancelling sums, so one device accumulating 4
# micro-batches differs from its one-batch step by 150 % there (float64, `loom verify`, agrees to 1e-13);
# and from step 2 on Adam turns its null-gradient elements' noise into moves of up to lr that change live
# activations (3F1B against that accumulation: 5e-6 after 1 step, 2e-3 after 3). So 3F1B is compared with
# the accumulation of the same micro-batches on one device (what the pipeline changes: placement, sends,
# order), after one step.
REFERENCE = {"alphafold2-87m": ["--policy", "megatron", "--microbatches", "4", "--gpus", "1"]}
STEPS_OF = {"alphafold2-87m": 1}


@pytest.fixture(scope="module")
def single_device(tmp_path_factory, loom_binary):
    run_loom = loom_runner(loom_binary)
    runs = {}
    for model in sorted({model for model, _ in CASES}):
        directory = emit_shrunk(run_loom, tmp_path_factory.mktemp(f"{model}-single"), model,
                                REFERENCE.get(model, ["--policy", "dp", "--dp", "1", "--gpus", "1"]))
        runs[model] = train(directory, STEPS_OF.get(model, STEPS))
    return runs


def null_gradient_elements(reference, name):
    """The elements of parameter `name` whose exact gradient is zero in every step (GPT's key bias: softmax
    ignores a shift shared by all keys): the reference's first moment there is rounding noise, and Adam
    divides that noise by itself, so the element moves by up to lr per step in an arbitrary direction."""
    m = reference.get(f"{name}.exp_avg.updated")
    if m is None:
        return None
    m = m.double().abs()
    return m <= 1e-6 * max(m.max().item(), FLOOR)


def worst_error(reference, candidate, lr):
    """(max rel, tensor, null elements) over every tensor: rel = max |diff| / max(max |reference|, FLOOR); a
    parameter's null-gradient elements are held to the bound Adam's steps give them instead (2 lr a step)."""
    worst, nulls = (0.0, ""), 0
    for name, want in reference.items():
        got, want = candidate[name].double(), want.double()
        diff = (got - want).abs()
        null = null_gradient_elements(reference, name.removesuffix(".updated")) if name.endswith(".updated") else None
        if null is not None and null.shape == diff.shape and bool(null.any()):
            assert diff[null].max().item() <= 2 * lr * STEPS, f"{name}: a null-gradient element moved past Adam's bound"
            nulls += int((null & (diff > 0)).sum())
            diff = diff.masked_fill(null, 0.0)
        rel = diff.max().item() / max(want.abs().max().item(), FLOOR)
        if rel >= worst[0]:
            worst = (rel, name)
    return (*worst, nulls)


def adam_lr(directory):
    import json

    manifest = json.loads((directory / "manifest.json").read_text())
    return next(float(op["attrs"]["lr"]) for op in manifest["sub_ops"].values() if op["type"] in ("adam", "adamw"))


@pytest.mark.parametrize(("model", "plan"), CASES)
def test_three_steps_train_as_one_device(model, plan, single_device, run_loom, tmp_path):
    directory = emit_shrunk(run_loom, tmp_path, model, PLANS[plan])
    steps = STEPS_OF.get(model, STEPS)
    losses, values = train(directory, steps, timeout=120)
    ref_losses, reference = single_device[model]
    assert len(losses) == steps and sorted(values) == sorted(reference)
    loss_rel = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    rel, where, nulls = worst_error(reference, values, adam_lr(directory))
    print(f"{model} {plan}: losses {' '.join(f'{x:.8g}' for x in losses)} (max rel {loss_rel:.2e}); worst rel "
          f"{rel:.2e} ({where}); {nulls} null-gradient elements differ (within Adam's bound)")
    assert loss_rel <= RTOL
    assert rel <= RTOL, f"{where}: relative error {rel:.3e}"


def test_steps_see_new_batches_and_updated_parameters(single_device):
    # Teeth: every step's loss differs (a new batch on updated weights), and step 3's parameters moved.
    losses, values = single_device["gpt3-125m"]
    assert len(set(losses)) == STEPS
    moved = [n for n in values if n.endswith(".weight.updated") and ".exp_avg" not in n]
    assert moved


def test_inputs_change_per_step_and_the_rest_does_not():
    batch = {"shape": [4, 8], "init": "integer", "bound": 50, "role": "input", "dtype": "i64"}
    weight = {"shape": [4, 8], "init": "uniform", "role": "parameter", "dtype": "f32"}
    assert torch.equal(initial_value("ids", batch, 1, {}), initial_value("ids", batch, 1, {}, step=0))
    assert not torch.equal(initial_value("ids", batch, 1, {}, step=0), initial_value("ids", batch, 1, {}, step=1))
    assert torch.equal(initial_value("w", weight, 1, {}, step=0), initial_value("w", weight, 1, {}, step=2))


@pytest.mark.parametrize("decoupled", [True, False])
def test_adam_counts_steps_as_torch_optim(decoupled):
    # The runtime's optimizer form at step t (bias correction 1 - beta^t) against torch.optim over 5 steps.
    torch.manual_seed(0)
    attrs = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}
    param = torch.randn(6, 5)
    reference = param.clone().requires_grad_(True)
    optim = (torch.optim.AdamW if decoupled else torch.optim.Adam)([reference], lr=1e-2, betas=(0.9, 0.95),
                                                                    eps=1e-8, weight_decay=0.1, foreach=False)
    m, v = torch.zeros_like(param), torch.zeros_like(param)
    for step in range(1, 6):
        grad = torch.randn(6, 5)
        reference.grad = grad.clone()
        optim.step()
        fn = build("adamw" if decoupled else "adam", {**attrs, "step": step}, [], [])
        param, m, v = fn(param.clone(), grad, m.clone(), v.clone())
        torch.testing.assert_close(param, reference.detach(), rtol=1e-6, atol=1e-7)


def test_zero_steps_is_refused(tmp_path):
    with pytest.raises(LaunchError, match="at least one step"):
        train(tmp_path, 0)
