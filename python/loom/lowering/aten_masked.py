"""Boolean masks whose count of true elements is a size (capture="export"): x[mask] (BART's end-of-sentence
tokens, X-MOD's per-language rows), nonzero(mask) (DeBERTa's kept labels) and x[mask] = rows (X-MOD writing
its adapters' rows back), with static shapes: the count is the examples' (the capture is specialized to them,
export_capture.py), the positions are computed in the graph from the mask, traced as the mask is.

The positions of a mask's true elements come from its running count: over the flattened mask m with
c = cumsum(m), the j-th true element (from 0) sits at p_j = #{i : c_i <= j}, since c never decreases and
first reaches j + 1 there: one comparison of c against 0 .. count-1 and a sum (count x numel elements, the
size of a one-hot gather). The other way, the true element at position i is row c_i - 1 of the rows written.
So the graph computes what torch computes for any batch whose mask has as many true elements as the examples'.
Another batch (the synthetic batches `loom verify` and the runtime draw) has no such tensor in torch (its size
differs); the graph still runs on it, every position clamped into range, the same function on every plan.
"""

import math

import torch

from .base import Meta, T


def named(op, args, kwargs):
    from .aten import named_arguments
    return named_arguments(op, args, kwargs)


def _column_of_nonzero(node):
    """(nonzero node, k) where `node` is column k of a nonzero's output: x[mask.nonzero().unbind(1)] as
    export decomposes it (squeeze(slice(nz, 1, k, k + 1), 1), or select(nz, 1, k)); else None."""
    aten = torch.ops.aten
    target = getattr(node, "target", None)
    if target == aten.squeeze.dim and node.args[1] in (1, -1):
        part = node.args[0]
        if getattr(part, "target", None) != aten.slice.Tensor or part.args[1:2] != (1,) or len(part.args) < 4 \
                or part.args[3] != part.args[2] + 1:
            return None
        source, k = part.args[0], part.args[2]
    elif target == aten.select.int and node.args[1] == 1:
        source, k = node.args[0], node.args[2]
    else:
        return None
    return (source, k) if getattr(source, "target", None) == aten.nonzero.default else None


def mask_of_columns(cx, index_nodes):
    """(first dim, mask) where the index is one mask's positions spelled as its nonzero's columns, in order,
    on consecutive dims (export_capture's spelling of x[mask] when specialized to the examples); else None."""
    used = [(d, n) for d, n in enumerate(index_nodes) if n is not None]
    columns = [_column_of_nonzero(n) for _, n in used]
    if not used or None in columns or len({source for source, _ in columns}) != 1:
        return None
    source = columns[0][0]
    dims = [d for d, _ in used]
    rank = len(source.args[0].meta["val"].shape) if "val" in source.args[0].meta else None
    if [k for _, k in columns] != list(range(len(columns))) or rank != len(columns) \
            or dims != list(range(dims[0], dims[0] + len(dims))):
        return None
    return dims[0], cx.lowered[source.args[0]]


def is_mask(cx, index):
    return isinstance(index, (T, torch.Tensor)) and _dtype(cx, index) == torch.bool


def _dtype(cx, x):
    return cx.torch_dtype(x) if isinstance(x, T) else x.dtype


def _shape(cx, x):
    return list(cx.shape(x)) if isinstance(x, T) else list(x.shape)


def true_positions(cx, mask, count):
    """int64 [count]: the row-major positions of the mask's true elements (a constant mask's computed here)."""
    if not isinstance(mask, T):
        return cx.constant(mask.reshape(-1).nonzero().reshape(-1))
    numel = math.prod(_shape(cx, mask))
    running = _running_count(cx, mask)  # [numel]
    row = cx.emit("reshape", [running], {"shape": [1, numel]}, Meta([1, numel], torch.int64), suffix="count_row")
    slots = cx.constant(torch.arange(count, dtype=torch.int64).reshape(count, 1))
    before = cx.emit("le", [row, slots], {}, Meta([count, numel], torch.bool), suffix="before")
    counted = cx.emit("cast", [before], {"dtype": cx.dtype_name(torch.int64)}, Meta([count, numel], torch.int64),
                      suffix="before_count")
    positions = cx.emit("sum", [counted], {"dims": [1]}, Meta([count], torch.int64), suffix="positions_counted")
    # A batch with fewer true elements than the examples' would point past the end: the last element instead.
    last = cx.constant(torch.tensor(numel - 1, dtype=torch.int64))
    return cx.emit("minimum", [positions, last], {}, Meta([count], torch.int64), suffix="positions")


def _running_count(cx, mask):
    """int64 [numel]: how many of the flattened mask's elements up to each one are true (cumsum)."""
    numel = math.prod(_shape(cx, mask))
    flat = cx.emit("reshape", [mask], {"shape": [numel]}, Meta([numel], torch.bool), suffix="mask_flat")
    ones = cx.emit("cast", [flat], {"dtype": cx.dtype_name(torch.int64)}, Meta([numel], torch.int64),
                   suffix="mask_int")
    return cx.emit("cumsum", [ones], {"dim": 0}, Meta([numel], torch.int64), suffix="running_count")


def index_masked(cx, x, indices, value):
    """x[..., mask, ...] (aten.index with one boolean index, on the dims right after the leading slices):
    the masked dims merged into one, and the true elements' rows picked from it by index_select."""
    used = [d for d, index in enumerate(indices) if index is not None]
    if len(used) != 1 or not is_mask(cx, indices[used[0]]):
        return None
    first, mask = used[0], indices[used[0]]
    shape, mask_shape = _shape(cx, x), _shape(cx, mask)
    if shape[first:first + len(mask_shape)] != mask_shape:
        return None
    count = list(value.shape)[first]
    merged = shape[:first] + [math.prod(mask_shape)] + shape[first + len(mask_shape):]
    x = cx.tensor(x)
    if merged != shape:
        x = cx.emit("reshape", [x], {"shape": merged}, Meta(merged, value.dtype), suffix="masked_dims")
    if count == 0:
        return cx.constant(torch.zeros(list(value.shape), dtype=value.dtype))
    return cx.emit("index_select", [x, true_positions(cx, mask, count)], {"dim": first}, value)


def nonzero(cx, args, kwargs, value):
    """nonzero(mask): [count, rank] int64, each true element's coordinates: the rows of a constant table of
    every element's coordinates, picked at the true elements' positions."""
    mask = named(cx.node.target, args, kwargs)["self"]
    if not is_mask(cx, mask):
        return None
    count, shape = int(value.shape[0]), _shape(cx, mask)
    if count == 0:
        return cx.constant(torch.zeros(list(value.shape), dtype=torch.int64))
    grid = torch.stack(torch.unravel_index(torch.arange(math.prod(shape)), shape), dim=1) if shape else \
        torch.zeros(1, 0, dtype=torch.int64)
    return cx.emit("index_select", [cx.constant(grid), true_positions(cx, mask, count)], {"dim": 0}, value)


def index_put_rows(cx, x, mask, rows, value):
    """x[mask] = rows, one row per true element ([count, *x's trailing dims]; the mask on x's leading dims):
    each element of x reads row (running count - 1) of `rows`, kept where the mask is true. None where
    `rows` is not one row per true element."""
    shape, mask_shape = _shape(cx, x), _shape(cx, mask)
    trailing = shape[len(mask_shape):]
    rows_shape = _shape(cx, rows)
    if shape[:len(mask_shape)] != mask_shape or len(rows_shape) != 1 + len(trailing) or rows_shape[1:] != trailing:
        return None
    if rows_shape[0] == 0:
        return cx.tensor(x)  # nothing written
    numel = math.prod(mask_shape)
    # Elements before the first true one read row 0 (clamped from -1); where() drops them.
    if isinstance(mask, T):
        rank = cx.emit("add", [_running_count(cx, mask), cx.constant(torch.tensor(-1, dtype=torch.int64))], {},
                       Meta([numel], torch.int64), suffix="row")
        rank = cx.emit("maximum", [rank, cx.constant(torch.tensor(0, dtype=torch.int64))], {},
                       Meta([numel], torch.int64), suffix="row_from_0")
        # A batch with more true elements than the examples' would read past the rows: the last row instead.
        rank = cx.emit("minimum", [rank, cx.constant(torch.tensor(rows_shape[0] - 1, dtype=torch.int64))], {},
                       Meta([numel], torch.int64), suffix="row_clamped")
    else:
        rank = cx.constant((mask.reshape(-1).to(torch.int64).cumsum(0) - 1).clamp(min=0))
    rows = cx.tensor(rows)
    if cx.torch_dtype(rows) != value.dtype:
        rows = cx.emit("cast", [rows], {"dtype": cx.dtype_name(value.dtype)}, Meta(rows_shape, value.dtype),
                       suffix="rows_cast")
    spread = cx.emit("index_select", [rows, rank], {"dim": 0}, Meta([numel] + trailing, value.dtype),
                     suffix="rows_spread")
    if [numel] + trailing != shape:
        spread = cx.emit("reshape", [spread], {"shape": shape}, Meta(shape, value.dtype), suffix="rows_placed")
    keep = cx.tensor(mask)
    if trailing:
        full = mask_shape + [1] * len(trailing)
        keep = cx.emit("reshape", [keep], {"shape": full}, Meta(full, torch.bool), suffix="mask")
    return cx.emit("where", [keep, spread, cx.tensor(x)], {}, value)
