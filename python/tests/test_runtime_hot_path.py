"""The runtime's per-step economies (compute.py, forms/, allocator.py) keep every value: dropout's cached half
of the hash gives the interpreter's mask at every step, data movement hands out views of its input (no copy)
that every reader takes, the forward path leaves grad mode as it found it, and the rank processes' allocator
keeps a step's freed blocks."""

import ctypes
import subprocess
import sys

import numpy as np
import torch

from loom.runtime.compute import SubOp
from loom.runtime.forms import activation
from loom.runtime.initial import mix_array, mix_int


def spec(shape, offset=None, full=None, step=None, dtype="f32"):
    shape = list(shape)
    return {"shape": shape, "dtype": dtype, "offset": list(offset or [0] * len(shape)),
            "full": list(full or shape), "step": list(step or [1] * len(shape))}


def _interpreters_mask(p, seed, step, piece):
    """The reference formula over the whole tensor, restricted to the piece (offset and step per dimension)."""
    full = piece["full"]
    index = np.arange(int(np.prod(full)), dtype=np.uint64)
    key = mix_int(seed) if step <= 1 else mix_int(mix_int(seed) ^ mix_int(step))
    u = (mix_array(np.uint64(key) ^ mix_array(index)) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    whole = torch.from_numpy(u < p).reshape(full)
    cut = tuple(slice(o, o + n * s, s) for o, n, s in zip(piece["offset"], piece["shape"], piece["step"]))
    return whole[cut]


def test_dropout_hashes_each_piece_once_and_draws_the_interpreters_mask_at_every_step():
    activation._MIXED_INDEX.clear()
    pieces = [spec([3, 4, 5]), spec([3, 2, 5], offset=[0, 1, 0], full=[3, 4, 5], step=[1, 2, 1])]
    for step in (1, 2, 3, 7):
        for piece in pieces:
            got = activation.dropout_mask({"p": 0.3, "seed": 11, "step": step}, piece)
            assert torch.equal(got, _interpreters_mask(0.3, 11, step, piece)), (step, piece)
    assert len(activation._MIXED_INDEX) == len(pieces)  # one hash of the global index per piece, for all steps


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


_ALLOCATION = """
import ctypes, torch
from loom.runtime.allocator import keep_freed_memory

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
assert keep_freed_memory()
mapped = libc.mallinfo2().hblkhd
x = torch.ones(4 << 20)  # 16 MiB: a fresh mapping under glibc's default thresholds
in_heap = libc.mallinfo2().hblkhd == mapped
del x
free_in_heap = libc.mallinfo2().fordblks
print(in_heap, free_in_heap >= 16 << 20)
"""


def test_rank_processes_keep_freed_blocks_in_the_heap():
    """keep_freed_memory (the launcher's ranks call it): a 16 MiB tensor comes from the heap, not a mapping of
    its own, and stays there once freed (not returned to the kernel, which would fault it in again)."""
    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        return  # not glibc 2.33 or newer: nothing to observe
    done = subprocess.run([sys.executable, "-c", _ALLOCATION], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True"], done.stdout + done.stderr
