"""Views that pick elements by position (capture="export"): as_strided (Longformer's overlapping attention
chunks), unfold (sliding windows) and flip; and their inverse where each position is written once, an
index_put at constant integer positions (F.fold of non-overlapping patches: MobileViT V2). Each is an index_select of the positions it reads, so its backward
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
    """x.unfold(dim, size, step): windows along dim, a new last dim of `size`: index_select of every window's
    positions along dim (the other dims untouched, so they still split), that dim cut into [windows, size],
    and the size dim moved last."""
    a = named(cx.node.target, args, kwargs)
    x, dim, size, step = a["self"], int(a["dimension"]), int(a["size"]), int(a["step"])
    if not isinstance(x, T):
        return None
    shape = list(cx.shape(x))
    dim = dim + len(shape) if dim < 0 else dim
    windows = list(value.shape)[dim]
    if windows == 0 or size == 0:
        return None
    positions = (torch.arange(windows)[:, None] * step + torch.arange(size)[None, :]).reshape(-1)
    picked = shape[:dim] + [windows * size] + shape[dim + 1:]
    out = cx.emit("index_select", [x, cx.constant(positions)], {"dim": dim}, Meta(picked, value.dtype),
                  suffix="windows")
    cut = shape[:dim] + [windows, size] + shape[dim + 1:]
    out = cx.emit("reshape", [out], {"shape": cut}, Meta(cut, value.dtype), suffix="cut")
    if dim == len(shape) - 1:
        return cx.alias(out, value) if cut == list(value.shape) else None
    order = list(range(dim + 1)) + list(range(dim + 2, len(cut))) + [dim + 1]
    return cx.emit("permute", [out], {"dims": order}, value)


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


def put_at_positions(cx, x, indices, v, accumulate, value):
    """x[..., i, j, ..] = v (or += v) with constant integer indices on consecutive dims that name distinct
    positions (F.fold of non-overlapping patches): the indexed dims merged, each position reading its entry of
    v (index_select of the inverse permutation), zero where no entry lands; then x added (accumulating), or x
    kept where nothing lands. None where positions repeat (overlapping patches need sums) or an index is
    traced."""
    used = [d for d, i in enumerate(indices) if i is not None]
    if not used or used != list(range(used[0], used[-1] + 1)) or not all(
            isinstance(indices[d], torch.Tensor) and not indices[d].dtype.is_floating_point
            and indices[d].dtype != torch.bool for d in used):
        return None
    shape, first, dtype = list(value.shape), used[0], value.dtype
    sizes = [shape[d] for d in used]
    picks = torch.broadcast_tensors(*[indices[d].to(torch.int64) for d in used])
    flat = torch.zeros(picks[0].shape, dtype=torch.int64)
    for pick, size in zip(picks, sizes):
        flat = flat * size + torch.remainder(pick, size)
    flat = flat.reshape(-1)
    if flat.unique().numel() != flat.numel():
        return None
    slots = math.prod(sizes)
    target = shape[:first] + list(picks[0].shape) + shape[used[-1] + 1:]
    v = cx.tensor(v) if isinstance(v, (T, torch.Tensor)) else cx.constant(torch.tensor(v, dtype=dtype))
    if list(cx.shape(v)) != target:
        v = cx.emit("expand", [v], {"shape": target}, Meta(target, dtype), suffix="values")
    merged = shape[:first] + [flat.numel()] + shape[used[-1] + 1:]
    v = cx.emit("reshape", [v], {"shape": merged}, Meta(merged, dtype), suffix="entries")
    inverse = torch.zeros(slots, dtype=torch.int64)
    inverse[flat] = torch.arange(flat.numel())
    spread_shape = shape[:first] + [slots] + shape[used[-1] + 1:]
    placed = cx.emit("index_select", [v, cx.constant(inverse)], {"dim": first}, Meta(spread_shape, dtype),
                     suffix="spread")
    placed = cx.emit("reshape", [placed], {"shape": shape}, Meta(shape, dtype), suffix="placed")
    landed = torch.zeros(slots, dtype=torch.bool)
    landed[flat] = True
    landed = landed.reshape([1] * first + sizes + [1] * (len(shape) - used[-1] - 1))
    zeros_x = isinstance(x, torch.Tensor) and not bool(x.any())
    if bool(landed.all()):
        return placed if zeros_x or not accumulate else cx.emit("add", [cx.tensor(x), placed], {}, value)
    if accumulate or zeros_x:
        placed = cx.emit("where", [cx.constant(landed), placed, cx.constant(torch.zeros((), dtype=dtype))], {},
                         Meta(shape, dtype), suffix="landed")
        return placed if zeros_x else cx.emit("add", [cx.tensor(x), placed], {}, value)
    return cx.emit("where", [cx.constant(landed), placed, cx.tensor(x)], {}, value)
