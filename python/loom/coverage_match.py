"""The training comparison of loom.coverage (--match): the dp 2 and tp 2 plans of a class's graph and its 1-device
plan are emitted (`--emit`) and run one step (loom.runtime.launch.train, gloo), and the class matches when the loss
and every updated parameter of both parallel runs equal the 1-device run's: per tensor, max |difference| <= RTOL x
max(max |reference|, FLOOR x the largest value among the compared tensors). The step is SGD with learning rate 1,
so an updated parameter is the parameter minus its whole gradient: a wrong gradient shows. (One Adam step would
turn rounding noise in a gradient that is exactly zero, e.g. of the key bias, which softmax ignores, into a step
of the learning rate's size with a random sign; the floor lets such noise pass, not a real error.)

Where float32 rounding alone moves the steps apart by more than RTOL, the model is traced again in float64 and the
same three plans of that graph are trained and compared at the same RTOL (the engine's losses are float32
scalars: in float64 graphs the loss is computed in float32 and cast):
- a class with a training-mode batch norm always: its float32 step divides by a small batch's variance;
- any other class whose float32 parallel step differs: the parallel plans add the same terms in another order (a
  data-parallel gradient is the sum of the ranks' sums, a row-parallel linear's output the sum of its shards'),
  and where the terms cancel, float32 rounding of the order reaches 1e-5 of the result. A wrong plan differs as
  much in float64; rounding shrinks by ~1e9. The row keeps the float32 difference (`float32`).
A class as far off in float64 is compared once more in float64 from its own parameters on its batch (the runtime's
seeded values are uniform(-0.5, 0.5) for every parameter, which a model that scales parameters by large factors,
as Dory's nGPT scales do, turns into an ill-conditioned step; a wrong plan differs from any start): it matches
when that step does (`own_init`, the seeded float64 difference kept as `seeded`).
"""

import os
import subprocess

from .coverage_engine import PLANS, SINGLE, engine_error, failure_reason, run_plan, time_limit

MATCH_STEP = ["--optimizer", "sgd", "--lr", "1"]  # the updated parameters carry the whole gradients
RTOL, FLOOR = 1e-5, 1e-3
DIFFERS = " differs from 1 device: "  # in the reason of a parallel step that trained but to other values


def worst_error(reference, candidate):
    """(max relative error, tensor name) over every tensor of the reference run (the loss and the updated
    parameters): max |difference| / max(max |reference|, FLOOR x the largest reference value of all); a
    tensor missing from the candidate, or of another shape, is infinitely off."""
    largest = max((want.abs().max().item() for want in reference.values() if want.numel()), default=0.0)
    worst = (0.0, "")
    for name, want in reference.items():
        got = candidate.get(name)
        if got is None or got.shape != want.shape:
            return float("inf"), name
        want = want.double()
        scale = max(want.abs().max().item() if want.numel() else 0.0, FLOOR * largest, 1e-30)
        rel = (got.double() - want).abs().max().item() / scale if want.numel() else 0.0
        if rel != rel:  # NaN: as far off as a missing tensor
            return float("inf"), name
        if rel >= worst[0]:
            worst = (rel, name)
    return worst


def check_match(loom_binary, path, workdir, name, timeout=180, own=None):
    """'' when one SGD step of the dp and tp plans of the graph at `path` (gloo) equals the 1-device plan's step,
    else why not (a reason with DIFFERS when a parallel step trained to other values). The step starts from the
    runtime's seeded values, or with `own` ((model, batch) the graph was traced from) from the model's own
    parameters on that batch."""
    from loom.runtime.initial import module_state
    from loom.runtime.launch import LaunchError, load_manifest, train
    results = {}
    for plan, options in {"single": SINGLE, **PLANS}.items():
        emit = os.path.join(workdir, f"{name}-{plan}-emit")
        try:
            result = run_plan(loom_binary, path, options + MATCH_STEP, os.path.join(workdir, f"{name}-{plan}-out"),
                           timeout, emit)
        except subprocess.TimeoutExpired:
            return f"emit {plan}: took longer than {timeout} s"
        except OSError as e:
            return f"emit {plan}: {e}"
        if result.returncode != 0:
            return f"emit {plan}: {engine_error(result)}"
        try:
            given = {} if own is None else {"initial": module_state(own[0], load_manifest(emit)), "batches": [own[1]]}
            results[plan] = train(emit, 1, timeout=timeout, **given)[1]
        except LaunchError as e:
            return f"run {plan}: {str(e).splitlines()[0]}"[:300]
        except Exception as e:  # noqa: BLE001: the class's failure (results that do not assemble), not the run's
            return f"run {plan}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    reference = results.pop("single")
    for plan, values in results.items():
        rel, where = worst_error(reference, values)
        if not rel <= RTOL:
            return f"{plan}{DIFFERS}{where} relative error {rel:.2e}"
    return ""


def has_batch_norm(model):
    """Whether a training-mode batch norm is in the model: its step is compared in float64."""
    import torch.nn as nn
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training for m in model.modules())


def _float64_graph(model, inputs, loss, workdir, name, timeout, capture):
    """The model and its floating inputs in float64, traced again and saved: (path, float64 inputs, '') or
    ('', None, why not)."""
    import loom
    try:
        with time_limit(timeout):
            model.double()
            inputs = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
            graph = loom.trace(model, inputs, loss=loss, capture=capture)
    except Exception as e:  # noqa: BLE001: the row's failure
        return "", None, "float64 trace: " + failure_reason(e)
    path = os.path.join(workdir, f"{name}-f64.json")
    loom.save_graph(graph, path)
    return path, inputs, ""


def compare_training(model, inputs, loss, path, loom_binary, workdir, name, timeout=180, capture="auto"):
    """The match fields of a row whose graph (at `path`, traced from `model` on `inputs`) plans both ways:
    {match, reason} and, where the step was compared in float64, float64: True and float32: the float32 step's
    difference ('' for a batch-norm class, compared in float64 from the start). Leaves `model` in float64 then."""
    if has_batch_norm(model):
        path64, _, why = _float64_graph(model, inputs, loss, workdir, name, timeout, capture)
        if why:
            return {"match": False, "reason": why}
        why = check_match(loom_binary, path64, workdir, name + "-f64", timeout)
        return {"match": not why, "reason": why, "float64": True, "float32": ""}
    why = check_match(loom_binary, path, workdir, name, timeout)
    if DIFFERS not in why:
        return {"match": not why, "reason": why}
    path64, inputs64, failed = _float64_graph(model, inputs, loss, workdir, name, timeout, capture)
    if failed:
        return {"match": False, "reason": f"{why}; {failed}"[:300]}
    why64 = check_match(loom_binary, path64, workdir, name + "-f64", timeout)
    if not why64:
        return {"match": True, "reason": "", "float64": True, "float32": why}
    if DIFFERS not in why64:
        return {"match": False, "reason": f"{why}; float64: {why64}"[:300]}
    # As far off in float64 from the seeded values: a wrong plan, or a step the seeded values make
    # ill-conditioned where the model computes in float32 inside (Dory scales uniform(-0.5, 0.5) parameters by
    # 1 / initializer_range, ~56 to 200, then squares them, and casts its norms to float32): the model's own
    # parameters on its batch decide.
    why_own = check_match(loom_binary, path64, workdir, name + "-f64-own", timeout, own=(model, inputs64))
    if why_own:
        return {"match": False, "reason": f"{why}; float64: {why64}; own parameters: {why_own}"[:300]}
    return {"match": True, "reason": "", "float64": True, "float32": why, "seeded": why64, "own_init": True}

