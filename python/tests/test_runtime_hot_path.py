"""The runtime's per-step economies (compute.py, forms/) keep every value: data movement hands out views of
its input (no copy) that every reader takes, and the forward path leaves grad mode as it found it."""

import torch

from loom.runtime.compute import SubOp


def spec(shape, offset=None, full=None, step=None, dtype="f32"):
    shape = list(shape)
    return {"shape": shape, "dtype": dtype, "offset": list(offset or [0] * len(shape)),
            "full": list(full or shape), "step": list(step or [1] * len(shape))}


def _forward(op_type, attrs, inputs, outputs):
    return SubOp({"name": op_type, "type": op_type, "attrs": attrs, "inputs": inputs, "outputs": outputs}, "cpu")


def test_data_movement_returns_views_that_readers_take():
    x = torch.randn(2, 3, 4)
    for op_type, attrs, out_shape in [("transpose", {"dim0": 1, "dim1": 2}, [2, 4, 3]),
                                      ("permute", {"dims": [2, 0, 1]}, [4, 2, 3]),
                                      ("expand", {"shape": [2, 2, 3, 4]}, [2, 2, 3, 4])]:
        (y,) = _forward(op_type, attrs, [spec([2, 3, 4])], [spec(out_shape)])(x)
        assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr(), op_type  # no copy
    pieces = _forward("split", {"dim": 1, "sizes": [1, 2]}, [spec([2, 3, 4])], [spec([2, 1, 4]), spec([2, 2, 4])])(x)
    assert [p.untyped_storage().data_ptr() for p in pieces] == [x.untyped_storage().data_ptr()] * 2
    assert torch.equal(torch.cat(pieces, 1), x)
    # A strided view read by a reshape that cannot view it, a matmul and a contiguous op: torch's values.
    t = x.transpose(1, 2)
    (flat,) = _forward("view", {"shape": [2, 12]}, [spec([2, 4, 3])], [spec([2, 12])])(t)
    assert torch.equal(flat, t.reshape(2, 12))
    (dense,) = _forward("contiguous", {}, [spec([2, 4, 3])], [spec([2, 4, 3])])(t)
    assert dense.is_contiguous() and torch.equal(dense, t)
    (product,) = _forward("matmul", {}, [spec([2, 4, 3]), spec([3, 5])], [spec([2, 4, 5])])(t, torch.ones(3, 5))
    assert torch.equal(product, t.contiguous() @ torch.ones(3, 5))


def test_forward_runs_without_a_graph_and_leaves_grad_mode_as_it_was():
    op = _forward("mul", {}, [spec([3]), spec([3])], [spec([3])])
    a = torch.ones(3, requires_grad=True)
    for enabled in (True, False):
        with torch.set_grad_enabled(enabled):
            (y,) = op(a, torch.full((3,), 2.0))
            assert not y.requires_grad and torch.is_grad_enabled() == enabled
