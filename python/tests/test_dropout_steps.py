"""Dropout draws a new mask every step: step 1 keys the mask by the seed attribute alone (as `loom verify`'s
interpreter), step k > 1 mixes k in; forward and backward of one step share the mask, and a shard's mask is
the whole's mask restricted to it, so plans still train as one device (test_runtime_steps runs the gpt3-125m
preset, which has dropout, for 3 steps under dp, tp, dp x tp and 1F1B: checked here that it has)."""

import json

import numpy as np
import torch
from conftest import emit_shrunk

from loom.runtime.compute import SubOp
from loom.runtime.initial import mix_array, mix_int
from loom.runtime.forms import build_placed

SHAPE = [4, 6, 8]


def spec(shape=SHAPE, offset=None, full=None):
    return {"shape": list(shape), "dtype": "f32", "offset": list(offset or [0] * len(shape)),
            "full": list(full or shape), "step": [1] * len(shape)}


def mask(attrs, out=None):
    return build_placed("dropout", attrs, [spec()], [out or spec()])(torch.ones(out["shape"] if out else SHAPE))[0]


def test_step_one_is_the_interpreters_mask_and_later_steps_differ():
    attrs = {"p": 0.5, "seed": 7}
    first = mask(attrs)
    # The interpreter's formula: u of element i from (seed, global flat index i).
    index = np.arange(np.prod(SHAPE), dtype=np.uint64)
    u = (mix_array(np.uint64(mix_int(7)) ^ mix_array(index)) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    assert torch.equal(first, torch.from_numpy(np.where(u < 0.5, 0.0, 2.0)).float().reshape(SHAPE))
    assert torch.equal(first, mask({**attrs, "step": 1}))
    second, third = mask({**attrs, "step": 2}), mask({**attrs, "step": 3})
    assert not torch.equal(first, second) and not torch.equal(second, third)
    assert torch.equal(second, mask({**attrs, "step": 2})), "a step's mask is reproducible"
    assert 0.3 < float((second == 0).float().mean()) < 0.7


def test_a_shard_draws_the_wholes_mask_at_every_step():
    attrs = {"p": 0.5, "seed": 3, "step": 2}
    whole = mask(attrs)
    shard = mask(attrs, spec([4, 3, 8], offset=[0, 3, 0], full=SHAPE))
    assert torch.equal(shard, whole[:, 3:])


def test_forward_and_backward_sub_ops_follow_the_runtimes_step():
    forward_spec = {"name": "drop", "type": "dropout", "attrs": {"p": 0.5, "seed": 1}, "inputs": [spec()],
                    "outputs": [spec()]}
    backward_spec = {"name": "drop.grad", "type": "dropout_backward", "attrs": {}, "inputs": [spec()],
                     "outputs": [spec()],
                     "backward_of": {**forward_spec, "saved_inputs": False, "saved_outputs": False,
                                     "grad_inputs": [0], "grad_outputs": [0]}}
    forward, backward = SubOp(forward_spec, "cpu"), SubOp(backward_spec, "cpu")
    ones = torch.ones(SHAPE)
    masks = []
    for step in (1, 2):
        forward.set_step(step)
        backward.set_step(step)
        y, = forward(ones)
        g, = backward(ones)
        assert torch.equal(y, g), f"step {step}: the backward scales by the forward's mask"
        masks.append(y)
    assert not torch.equal(*masks)


def test_the_step_suite_preset_has_dropout(run_loom, tmp_path):
    manifest = json.loads((emit_shrunk(run_loom, tmp_path, "gpt3-125m", ["--policy", "dp", "--dp", "1", "--gpus", "1"]) /
                           "manifest.json").read_text())
    # A dropout without "p" drops 0.1 (the op's default, forms/activation.py).
    rates = [float(op["attrs"].get("p", 0.1)) for op in manifest["sub_ops"].values() if op["type"] == "dropout"]
    assert rates and all(p > 0 for p in rates)
