"""The runtime's batched work (docs/codegen.md, "Gradient buckets" measurements): Adam(W) steps deferred and run
as one multi-tensor fused call per group (runtime.Runtime, compute.flush_adam) give every value the per-parameter
step gives, bit for bit; dropout masks hashed in torch (forms.activation.dropout_multiplier) are the numpy
generator's."""

import random

import numpy as np
import torch

from loom.runtime import forms
from loom.runtime.forms.activation import dropout_multiplier
from loom.runtime.compute import SubOp
from loom.runtime.initial import mix_array, mix_int
from loom.runtime.runtime import Runtime


def _adam_spec(kind, shape, attrs, dtype="f32"):
    tensor = {"shape": list(shape), "dtype": dtype, "full": list(shape)}
    n = 4 if attrs.get("master_weights") else 3
    return {"name": f"p.{kind}", "type": kind, "attrs": attrs, "inputs": [tensor] * (n + 1), "outputs": [tensor] * n}


def _random_adam_program(rng):
    """Sub-ops of random shapes and hyperparameters (some shared, so that groups form) and their inputs."""
    sub_ops, calls = {}, []
    shared = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}
    for i in range(rng.randint(1, 8)):
        kind = rng.choice(["adam", "adamw"])
        attrs = dict(shared) if rng.random() < 0.6 else {"lr": rng.choice([1e-2, 1e-4]), "weight_decay": 0.01}
        if rng.random() < 0.2:
            attrs["master_weights"] = True
        shape = [rng.randint(1, 7) for _ in range(rng.randint(1, 3))]
        sub_ops[str(i)] = _adam_spec(kind, shape, attrs)
        n_states = 3 if attrs.get("master_weights") else 2
        param, grad = torch.randn(shape), torch.randn(shape)
        states = ([param.clone()] if attrs.get("master_weights") else []) + [torch.randn(shape) * 0.1,
                                                                             torch.rand(shape) * 0.01]
        assert len(states) == n_states
        calls.append((i, [param, grad, *states]))
    return {"description": "adam", "tensors": {}, "sub_ops": sub_ops}, calls


def test_deferred_adam_steps_equal_the_per_parameter_steps_bit_for_bit():
    rng = random.Random(5)
    for case in range(40):
        manifest, calls = _random_adam_program(rng)
        step = rng.randint(0, 4)
        rt = Runtime(manifest, 0, start_step=step)
        originals = [[x.clone() for x in inputs] for _, inputs in calls]
        batched = [rt.compute(i, *inputs) for i, inputs in calls]
        for (_, inputs), before in zip(calls, originals):
            assert all(torch.equal(x, y) for x, y in zip(inputs, before)), "a step wrote its input buffer"
        rt.finish()  # runs the deferred steps (any other instruction would)
        for (i, inputs), outputs in zip(calls, batched):
            op = SubOp(manifest["sub_ops"][str(i)], torch.device("cpu"))
            op.set_step(step + 1)
            expected = op(*inputs)  # the unbatched path
            assert len(outputs) == len(expected)
            for got, want in zip(outputs, expected):
                assert torch.equal(got, want), f"case {case}, sub-op {i}"


def test_deferred_steps_run_before_another_instruction_reads_them():
    manifest, _ = _random_adam_program(random.Random(1))
    manifest["sub_ops"] = {"0": _adam_spec("adamw", [3], {"lr": 0.5})}
    rt = Runtime(manifest, 0)
    param = torch.ones(3)
    updated, _, _ = rt.compute(0, param, torch.ones(3), torch.zeros(3), torch.zeros(3))
    moved = rt.slice(updated, (((0, 3, 1),), (0, 1)), (((0, 2, 1),), (0, 1)))
    assert torch.all(moved < 1) and torch.equal(param, torch.ones(3))


def _numpy_global_flat_index(spec):
    """Each local element's flat index in the whole tensor (row-major), uint64: the numpy form the runtime used."""
    shape, step, full = spec["shape"], spec.get("step"), spec["full"]
    offset = list(spec.get("offset", [0] * len(shape)))
    step = step or [1] * len(shape)
    flat = np.zeros(shape, dtype=np.uint64)
    stride = 1
    for d in reversed(range(len(shape))):
        coords = (offset[d] + np.arange(shape[d], dtype=np.int64) * step[d]).astype(np.uint64)
        view = [1] * len(shape)
        view[d] = shape[d]
        flat = flat + coords.reshape(view) * np.uint64(stride)
        stride *= full[d]
    return flat


def _numpy_multiplier(attrs, spec):
    """The mask as the numpy generator hashed it before (initial.mix_array over uint64)."""
    p, seed, step = float(attrs.get("p", 0.1)), int(attrs.get("seed", 0)), int(attrs.get("step", 1))
    key = np.uint64(mix_int(seed) if step <= 1 else mix_int(mix_int(seed) ^ mix_int(step)))
    bits = mix_array(key ^ mix_array(_numpy_global_flat_index(spec))) >> np.uint64(11)
    u = bits.astype(np.float64) * 2.0 ** -53
    return torch.from_numpy(np.where(u < p, 0.0, 1.0 / (1.0 - p)))


def test_torch_dropout_masks_are_the_numpy_generators():
    rng = random.Random(3)
    for case in range(200):
        nd = rng.randint(1, 4)
        full = [rng.randint(1, 9) for _ in range(nd)]
        step = [rng.randint(1, 2) for _ in range(nd)]
        offset = [rng.randint(0, f - 1) for f in full]
        shape = [max(1, (f - o + s - 1) // s) for f, o, s in zip(full, offset, step)]
        spec = {"shape": shape, "offset": offset, "step": step, "full": full}
        attrs = {"p": rng.choice([0.0, 0.1, 0.5, 0.9]), "seed": rng.randint(0, 2 ** 63), "step": rng.randint(1, 5)}
        got, want = dropout_multiplier(attrs, spec), _numpy_multiplier(attrs, spec)
        assert got.dtype == want.dtype == torch.float64 and torch.equal(got, want), (case, attrs, spec)
    form = forms.build_placed("dropout", {"p": 0.3, "seed": 9}, [spec], [spec])
    x = torch.randn(spec["shape"])
    assert torch.equal(form(x)[0], x * _numpy_multiplier({"p": 0.3, "seed": 9}, spec).to(torch.float32))
