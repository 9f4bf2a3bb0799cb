"""Views that pick elements by position (capture="export"): as_strided (Longformer's overlapping attention
chunks), unfold (sliding windows) and flip. Each is an index_select of the positions it reads, so its backward
is index_select's, a scatter-add: overlapping windows add their gradients, as torch's backward does.

as_strided(x, size, stride, offset) reads x's storage: element (i_0, .., i_k) is storage[offset + sum i_d
stride_d]. It is lowered where that storage is x's own elements in some order of its dims (x dense, as export
recorded its strides: a transposed tensor's view too) and every position lies inside x. The positions are
built in the graph from one small constant per dim, added with broadcasting, rather than stored as one
constant of the output's size."""

import math

import torch

from .base import Meta, T


def named(op, args, kwargs):
    from .aten import named_arguments
    return named_arguments(op, args, kwargs)


def strided_positions(cx, size, stride, offset):
    """int64 [prod(size)]: offset + sum_d arange(size_d) * stride_d, row-major over `size`."""
    rank = len(size)
    total = None
    for d, (n, step) in enumerate(zip(size, stride)):
        term = (torch.arange(n, dtype=torch.int64) * step + (offset if d == 0 else 0)).reshape(
            [1] * d + [n] + [1] * (rank - d - 1))
        if total is None:
            total, shape = cx.constant(term), list(term.shape)
            continue
        shape = [max(a, b) for a, b in zip(shape, term.shape)]
        total = cx.emit("add", [total, cx.constant(term)], {}, Meta(shape, torch.int64), suffix=f"positions{d}")
    if total is None:  # a rank-0 view: one element
        return cx.constant(torch.tensor([offset], dtype=torch.int64))
    count = math.prod(size)
    return cx.emit("reshape", [total], {"shape": [count]}, Meta([count], torch.int64), suffix="positions")


def pick_positions(cx, x, positions, count, value):
    """x's flattened elements at `positions`, in value's shape."""
    numel = math.prod(cx.shape(x))
    dtype = value.dtype
    flat = cx.emit("reshape", [x], {"shape": [numel]}, Meta([numel], dtype), suffix="flat")
    picked = cx.emit("index_select", [flat, positions], {"dim": 0}, Meta([count], dtype), suffix="picked")
    return cx.emit("reshape", [picked], {"shape": list(value.shape)}, value)


def as_strided(cx, args, kwargs, value):
    a = named(cx.node.target, args, kwargs)
    x, size, stride = a["self"], [int(n) for n in a["size"]], [int(s) for s in a["stride"]]
    recorded = cx.node.args[0].meta.get("val")
    if not isinstance(x, T) or not isinstance(recorded, torch.Tensor):
        return None
    # x's dims ordered by decreasing stride: where that order is contiguous, x's storage is x's elements in
    # that order (Longformer's chunks view a transposed tensor), x permuted so and flattened.
    order = sorted(range(recorded.dim()), key=lambda d: -recorded.stride(d))
    if not recorded.permute(order).is_contiguous():
        return None
    base = recorded.storage_offset()
    offset = a.get("storage_offset")
    offset = base if offset is None else int(offset)
    count = math.prod(size)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if count == 0 or offset < base or any(s < 0 for s in stride) or last >= base + recorded.numel():
        return None
    if order != sorted(order):
        shape = [cx.shape(x)[d] for d in order]
        x = cx.emit("permute", [x], {"dims": order}, Meta(shape, value.dtype), suffix="storage_order")
    return pick_positions(cx, x, strided_positions(cx, size, stride, offset - base), count, value)


def unfold(cx, args, kwargs, value):
    """x.unfold(dim, size, step): windows along dim, a new last dim of `size`: the strided view of a
    contiguous x (dim's stride times step between windows, dim's stride within one)."""
    a = named(cx.node.target, args, kwargs)
    x, dim, size, step = a["self"], int(a["dimension"]), int(a["size"]), int(a["step"])
    if not isinstance(x, T):
        return None
    shape = list(cx.shape(x))
    dim = dim + len(shape) if dim < 0 else dim
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    out_stride = strides[:dim] + [strides[dim] * step] + strides[dim + 1:] + [strides[dim]]
    count = math.prod(value.shape)
    if count == 0:
        return None
    return pick_positions(cx, x, strided_positions(cx, list(value.shape), out_stride, 0), count, value)


def flip(cx, args, kwargs, value):
    """x.flip(dims): per flipped dim, index_select of the reversed positions."""
    a = named(cx.node.target, args, kwargs)
    x = a["self"]
    if not isinstance(x, T):
        return None
    shape = list(cx.shape(x))
    dims = sorted({d + len(shape) if d < 0 else d for d in a["dims"]})
    for k, d in enumerate(dims):
        reverse = cx.constant(torch.arange(shape[d] - 1, -1, -1, dtype=torch.int64))
        last = k == len(dims) - 1
        x = cx.emit("index_select", [x, reverse], {"dim": d}, value if last else Meta(shape, value.dtype),
                    suffix=None if last else f"flip{d}")
    return x if dims else cx.alias(x, value)
