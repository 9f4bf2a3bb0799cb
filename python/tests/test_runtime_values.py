"""Values a run starts from besides the seeded generator (runtime.Runtime initial= / set_batch, initial.module_state),
and the slice form over shards (forms/shape.py): the piece arithmetic against torch's own slicing."""

import random

import pytest
import torch

from loom.runtime import forms
from loom.runtime.initial import module_state
from loom.runtime.runtime import Runtime

MANIFEST = {
    "description": "test",
    "tensors": {
        "x": {"role": "input", "dtype": "f32", "shape": [4, 6], "init": "uniform"},
        "ids": {"role": "input", "dtype": "i64", "shape": [4], "init": "integer", "bound": 10},
        "w": {"role": "parameter", "dtype": "f32", "shape": [6, 2], "init": "uniform"},
        "w.master": {"role": "optimizer_state", "dtype": "f32", "shape": [6, 2], "init": "copy", "copy_of": "w"},
        "w.updated": {"role": "parameter", "dtype": "f32", "shape": [6, 2], "init": "uniform", "updates": "w"},
        "pos": {"role": "buffer", "dtype": "i64", "shape": [3], "init": "constant", "value": [0.0, 1.0, 2.0]},
    },
    "sub_ops": {},
}


def piece(*box, part=(0, 1)):
    return (tuple(box), part)


def test_given_values_load_as_pieces_and_masters_follow_their_parameter():
    w = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    rt = Runtime(MANIFEST, 0, initial={"w": w})
    assert torch.equal(rt.load("w", piece((2, 4, 1), (0, 2, 1))), w[2:4])
    assert torch.equal(rt.load("w.master", piece((0, 6, 1), (1, 2, 1))), w[:, 1:2])
    assert torch.equal(rt.load("w", piece((0, 6, 1), (0, 2, 1), part=(1, 2))), w / 2)  # a value part holds whole / n
    assert torch.equal(rt.load("pos", piece((0, 3, 1))), torch.tensor([0, 1, 2]))  # the program's own constant


def test_batch_replaces_generated_inputs_for_one_step():
    rt = Runtime(MANIFEST, 0)
    x = torch.randn(4, 6)
    rt.set_batch({"x": x})
    assert torch.equal(rt.load("x", piece((1, 3, 1), (0, 6, 1))), x[1:3])
    rt.next_step()
    assert not torch.equal(rt.load("x", piece((0, 4, 1), (0, 6, 1))), x)  # the next step draws its own


@pytest.mark.parametrize("values, message", [
    ({"nope": torch.zeros(1)}, "names no tensor"),
    ({"w": torch.zeros(2, 6)}, "has shape (2, 6); the plan's tensor is (6, 2)"),
])
def test_given_values_are_checked(values, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Runtime(MANIFEST, 0, initial=values)


def test_batch_values_must_be_inputs():
    with pytest.raises(ValueError, match="not an input of the plan"):
        Runtime(MANIFEST, 0).set_batch({"w": torch.zeros(6, 2)})


def test_module_state_reshapes_views_and_names_missing_parameters():
    module = torch.nn.Linear(2, 6, bias=False)  # weight [6, 2]
    manifest = {"tensors": {"weight": {"role": "parameter", "shape": [3, 2, 2]},
                            "weight.updated": {"role": "parameter", "shape": [3, 2, 2], "updates": "weight"}}}
    state = module_state(module, manifest)
    assert list(state) == ["weight"] and torch.equal(state["weight"], module.weight.detach().reshape(3, 2, 2))
    with pytest.raises(ValueError, match="does not have"):
        module_state(module, {"tensors": {"bias": {"role": "parameter", "shape": [6]}}})
    with pytest.raises(ValueError, match="does not hold"):
        module_state(module, {"tensors": {"weight": {"role": "parameter", "shape": [5]}}})


def test_slice_over_shards_reads_the_whole_tensors_elements():
    """Random whole tensors, slices (negative starts, steps) and shards of input and output along the sliced
    dim and another dim: the shard form gives the output shard of torch's slice of the whole."""
    rng = random.Random(7)
    for _ in range(200):
        n, m = rng.randint(2, 12), rng.randint(1, 5)
        whole = torch.arange(n * m, dtype=torch.float32).reshape(n, m)
        step = rng.randint(1, 3)
        start = rng.randint(-n, n - 1)
        begin = start + n if start < 0 else start
        end = rng.randint(begin + 1, n)
        expected = whole[begin:end:step]
        length = expected.shape[0]
        y_lo = rng.randint(0, length - 1)
        y_hi = rng.randint(y_lo + 1, length)
        col_lo = rng.randint(0, m - 1)
        first_read, last_read = begin + y_lo * step, begin + (y_hi - 1) * step
        x_lo, x_hi = rng.randint(0, first_read), rng.randint(last_read + 1, n)
        x_spec = {"shape": [x_hi - x_lo, m - col_lo], "offset": [x_lo, col_lo], "full": [n, m], "dtype": "f32"}
        y_spec = {"shape": [y_hi - y_lo, m - col_lo], "offset": [y_lo, col_lo], "full": [length, m], "dtype": "f32"}
        attrs = {"dim": 0, "start": start, "end": end, "step": step}
        form = forms.build_placed("slice", attrs, [x_spec], [y_spec])
        (got,) = form(whole[x_lo:x_hi, col_lo:])
        assert torch.equal(got, expected[y_lo:y_hi, col_lo:]), (n, start, end, step, y_lo, y_hi, x_lo, x_hi)
