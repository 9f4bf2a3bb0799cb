"""Handlers of shape, indexing, comparison, selection and padding ops."""

import math

import torch

from .base import Meta, T, _arg, _dims, _is_tensor, _scalar_operand


def _reshape(type_):
    def handler(cx, args, kwargs, value):
        return cx.emit(type_, [args[0]], {"shape": list(value.shape)}, value)
    return handler


def _flatten(cx, args, kwargs, value):
    return cx.emit("flatten", [args[0]], {"start_dim": int(_arg(args, kwargs, 1, "start_dim", 0)),
                                          "end_dim": int(_arg(args, kwargs, 2, "end_dim", -1))}, value)


def _permute(cx, args, kwargs, value):
    dims = args[1:] if len(args) > 2 or isinstance(_arg(args, kwargs, 1, "dims"), int) else _arg(args, kwargs, 1, "dims")
    return cx.emit("permute", [args[0]], {"dims": [int(d) for d in dims]}, value)


def _transpose(cx, args, kwargs, value):
    return cx.emit("transpose", [args[0]], {"dim0": int(_arg(args, kwargs, 1, "dim0")),
                                            "dim1": int(_arg(args, kwargs, 2, "dim1"))}, value)


def _t(cx, args, kwargs, value):
    if len(value.shape) < 2:
        return cx.alias(args[0], value)
    return cx.emit("transpose", [args[0]], {"dim0": 0, "dim1": 1}, value)


def _unsqueeze(cx, args, kwargs, value):
    return cx.emit("unsqueeze", [args[0]], {"dim": int(_arg(args, kwargs, 1, "dim"))}, value)


def _squeeze(cx, args, kwargs, value):
    dim = _arg(args, kwargs, 1, "dim")
    if isinstance(dim, (list, tuple)):
        return None
    return cx.emit("squeeze", [args[0]], {} if dim is None else {"dim": int(dim)}, value)


def _expand(cx, args, kwargs, value):
    return cx.emit("expand", [args[0]], {"shape": list(value.shape)}, value)


def _split(cx, args, kwargs, value):
    x = args[0]
    dim = int(_arg(args, kwargs, 2, "dim", 0))
    sizes = [int(part.shape[dim]) for part in value]
    if len(sizes) == 1:
        return (cx.alias(x, value[0]),)
    return cx.emit_many("split", [x], {"sizes": sizes, "dim": dim}, value)


def _chunk(cx, args, kwargs, value):
    x, chunks = args[0], int(_arg(args, kwargs, 1, "chunks"))
    dim = int(_arg(args, kwargs, 2, "dim", 0))
    if len(value) == 1:
        return (cx.alias(x, value[0]),)
    return cx.emit_many("chunk", [x], {"chunks": chunks, "dim": dim}, value)


def _concat(cx, args, kwargs, value):
    tensors = _arg(args, kwargs, 0, "tensors")
    dim = int(_arg(args, kwargs, 1, "dim", 0))
    # An empty part (GPT-NeoX Japanese's pass-through of a head rotated whole) adds nothing: the engine
    # has no empty tensors, and the op that made it is dropped as unused.
    parts = [cx.tensor(t) for t in tensors]
    parts = [t for t in parts if 0 not in cx.shape(t)] or parts
    if len(parts) == 1:
        return cx.alias(parts[0], value)
    return cx.emit("concat", parts, {"dim": dim}, value)


def _getattr(cx, args, kwargs, value):
    """x.T (HuggingFace's Falcon): the dims reversed; other attributes of traced tensors are not ops."""
    x, name = args[0], args[1]
    if name == "data" and _is_tensor(x):  # ImageGPT: the tensor's data, out of autograd
        return _detach(cx, [x], {}, value)
    if name != "T" or not _is_tensor(x):
        return None
    rank = cx.rank(x)
    if rank < 2:
        return cx.alias(x, value)
    return cx.emit("permute", [x], {"dims": list(range(rank))[::-1]}, value)


def _like(type_):
    """expand_as / reshape_as / view_as: the recorded output's shape."""
    def handler(cx, args, kwargs, value):
        return cx.emit(type_, [args[0]], {"shape": list(value.shape)}, value)
    return handler


def _contiguous(cx, args, kwargs, value):
    return cx.alias(args[0], value)  # layout only: the engine's tensors have no strides


def _convert(cx, args, kwargs, value):
    """.to / .type / .float / ...: a cast when the dtype changes, else the same tensor."""
    if not isinstance(value, torch.Tensor):
        return None
    if cx.torch_dtype(args[0]) == value.dtype:
        return cx.alias(args[0], value)
    return cx.emit("cast", [args[0]], {"dtype": cx.dtype_name(value.dtype)}, value)


def _masked_fill(cx, args, kwargs, value):
    x, mask, fill = args[0], cx.tensor(args[1]), _arg(args, kwargs, 2, "value")
    if isinstance(fill, torch.Tensor):
        fill = fill.item()
    return cx.emit("masked_fill", [x, mask], {"value": float(fill)}, value)


def _where(cx, args, kwargs, value):
    if len(args) != 3:
        return None
    cond, a, b = args
    like = a if _is_tensor(a) else b
    operands = _binary_operands(cx, (a, b), lambda x: _scalar_operand(cx, x, like, value))
    if operands is None:
        return None
    # torch promotes mixed values (an i64 tensor and a float one: BigBird's masks); the registry's where takes
    # its values' dtype from the first, so a value of another dtype is cast to the result's first.
    operands = [x if cx.torch_dtype(x) == value.dtype else
                cx.emit("cast", [x], {"dtype": cx.dtype_name(value.dtype)}, Meta(cx.shape(x), value.dtype),
                        suffix="promoted") for x in operands]
    return cx.emit("where", [cx.tensor(cond)] + operands, {}, value)


def _binary_operands(cx, pair, scalar):
    """The operands of a binary op as tensors: traced ones as they are, constant tensors as buffers, anything
    else through `scalar` (returning None when it cannot be lowered: then the list is None)."""
    operands = []
    for x in pair:
        if _is_tensor(x):
            operands.append(x)
        elif isinstance(x, torch.Tensor):
            operands.append(cx.constant(x))
        else:
            operand = scalar(x)
            if operand is None:
                return None
            operands.append(operand)
    return operands


def _clamp(cx, args, kwargs, value):
    lo, hi = _arg(args, kwargs, 1, "min"), _arg(args, kwargs, 2, "max")
    # A constant one-element bound (Swin V2's log(1 / 0.01)) is a number; a traced or wider one is not.
    lo, hi = (b.item() if isinstance(b, torch.Tensor) and b.numel() == 1 else b for b in (lo, hi))
    if isinstance(lo, (T, torch.Tensor)) or isinstance(hi, (T, torch.Tensor)):
        return None
    attrs = {}
    if lo is not None:
        attrs["min"] = float(lo)
    if hi is not None:
        attrs["max"] = float(hi)
    return cx.emit("clamp", [args[0]], attrs, value)


def _reduce(type_):
    def handler(cx, args, kwargs, value):
        x = args[0]
        dim = _arg(args, kwargs, 1, "dim", kwargs.get("axis"))  # numpy's name, which torch also takes (ImageGPT)
        keepdim = bool(_arg(args, kwargs, 2, "keepdim", False))
        dtype = kwargs.get("dtype")
        if dtype is None and type_ == "sum" and _is_tensor(x) and cx.torch_dtype(x) == torch.bool:
            dtype = value.dtype  # a count of true elements: torch sums booleans as integers
            x = cx.emit("cast", [x], {"dtype": cx.dtype_name(dtype)}, Meta(cx.shape(x), dtype), suffix="cast")
        elif dtype is not None and dtype != cx.torch_dtype(x):  # torch.sum(..., dtype=): the input cast first
            if not (_is_tensor(x) and dtype.is_floating_point and cx.torch_dtype(x).is_floating_point):
                return None
            x = cx.emit("cast", [x], {"dtype": cx.dtype_name(dtype)}, Meta(cx.shape(x), dtype), suffix="cast")
        attrs = {"keepdim": keepdim} if keepdim else {}
        if dim is not None:
            attrs["dims"] = _dims(dim, cx.rank(x))
        return cx.emit(type_, [x], attrs, value)
    return handler


def _is_integer_vector(cx, index):
    if isinstance(index, T):
        return cx.rank(index) == 1 and not cx.torch_dtype(index).is_floating_point and cx.torch_dtype(index) != torch.bool
    return isinstance(index, torch.Tensor) and index.dim() == 1 and index.dtype in (torch.int64, torch.int32)


def _getitem(cx, args, kwargs, value):
    """x[index] on a tensor: slices, None (a new dim), Ellipsis and integers (a slice then a squeeze)."""
    x, index = args[0], args[1]
    if _is_integer_vector(cx, index):
        return _index_select(cx, [x, 0, index], {}, value)  # x[ids]: rows picked by a 1-D integer index
    if _is_integer_index(cx, index):
        return _gather_rows(cx, x, index, value)
    if not isinstance(index, tuple):
        index = (index,)
    tensors = [k for k, i in enumerate(index) if isinstance(i, (T, torch.Tensor))]
    if len(tensors) == 1 and _is_integer_index(cx, index[tensors[0]]) \
            and all(i == slice(None) for k, i in enumerate(index) if k != tensors[0]):
        return _gather_rows(cx, x, index[tensors[0]], value, dim=tensors[0])  # LeViT's biases[:, idxs]
    lists = [k for k, i in enumerate(index) if isinstance(i, list)]
    if len(lists) == 1 and not any(isinstance(i, (T, torch.Tensor)) for i in index) and index[lists[0]] \
            and all(isinstance(v, int) and not isinstance(v, bool) for v in index[lists[0]]):
        return _getitem_with_list(cx, x, index, lists[0], value)
    if any(isinstance(i, (T, torch.Tensor, list)) for i in index):
        return None  # other advanced (tensor) indexing
    rank = cx.rank(x)
    consumed = sum(1 for i in index if i is not None and i is not Ellipsis)
    expanded = []
    for i in index:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (rank - consumed))
        else:
            expanded.append(i)
    dim, current = 0, x
    for i in expanded:
        if i is None:
            current = cx.emit("unsqueeze", [current], {"dim": dim}, cx.shape_after_unsqueeze(current, dim),
                              suffix=f"unsqueeze{dim}")
            dim += 1
        elif isinstance(i, slice):
            size = cx.shape(current)[dim]
            start, stop, step = i.indices(size)
            if step <= 0:
                return None
            if (start, stop, step) != (0, size, 1):
                current = cx.emit("slice", [current], {"dim": dim, "start": start, "end": stop, "step": step},
                                  cx.shape_after_slice(current, dim, start, stop, step), suffix=f"slice{dim}")
            dim += 1
        elif isinstance(i, int):
            size = cx.shape(current)[dim]
            start = i + size if i < 0 else i
            sliced = cx.emit("slice", [current], {"dim": dim, "start": start, "end": start + 1},
                             cx.shape_after_slice(current, dim, start, start + 1, 1), suffix=f"slice{dim}")
            current = cx.emit("squeeze", [sliced], {"dim": dim}, cx.shape_after_squeeze(sliced, dim),
                              suffix=f"squeeze{dim}")
        else:
            return None
    return current if current != x else cx.alias(x, value)


def _is_integer_index(cx, index):
    dtype = cx.torch_dtype(index) if isinstance(index, T) else getattr(index, "dtype", None)
    return isinstance(index, (T, torch.Tensor)) and dtype in (torch.int64, torch.int32)


def _gather_rows(cx, x, index, value, dim=0):
    """x[ids] with ids of any shape (Whisper's positions [1, s]), or x[:, ids]: the slices of the flattened
    ids picked by index_select along dim, then viewed as x.shape[:dim] + ids.shape + x.shape[dim + 1:]."""
    n = math.prod(cx.shape(index) if isinstance(index, T) else index.shape)
    if isinstance(index, T):
        flat = cx.emit("reshape", [index], {"shape": [n]}, Meta([n], cx.torch_dtype(index)), suffix="ids")
    else:
        flat = cx.constant(index.reshape(-1).clone())
    shape = list(cx.shape(cx.tensor(x)))
    rows = Meta(shape[:dim] + [n] + shape[dim + 1:], cx.torch_dtype(cx.tensor(x)))
    picked = cx.emit("index_select", [cx.tensor(x), flat], {"dim": dim}, rows, suffix="rows")
    return cx.emit("reshape", [picked], {"shape": list(value.shape)}, value)


def _getitem_with_list(cx, x, index, at, value):
    """x[..., [i, j], :]: the other entries (basic indexing) first, then the listed positions of that dim,
    a slice when they are consecutive (Falcon's x[..., [-2], :]), else an index_select of a constant index.
    torch keeps the dim of a lone list index in place, so the result's layout is the basic one's."""
    positions = index[at]
    basic = tuple(slice(None) if k == at else i for k, i in enumerate(index))
    current = _getitem(cx, [x, basic], {}, Meta(cx.shape(x), cx.torch_dtype(x)))
    if current is None:
        return None
    keeps = lambda i: not isinstance(i, int)  # noqa: E731: a slice or None is a dim of the result; an int is not
    if Ellipsis in index[:at]:
        dim = cx.rank(current) - 1 - sum(1 for i in index[at + 1:] if keeps(i))
    else:
        dim = sum(1 for i in index[:at] if keeps(i))
    size = cx.shape(current)[dim]
    positions = [p + size if p < 0 else p for p in positions]
    if not all(0 <= p < size for p in positions):
        return None
    if positions == list(range(positions[0], positions[0] + len(positions))):
        return cx.emit("slice", [current], {"dim": dim, "start": positions[0], "end": positions[-1] + 1}, value)
    return cx.emit("index_select", [current, cx.constant(torch.tensor(positions))], {"dim": dim}, value)


def _compare(type_):
    """a == b, a < b, ...: a boolean tensor; a number operand becomes a rank-0 buffer."""
    def handler(cx, args, kwargs, value):
        a, b = args[0], _arg(args, kwargs, 1, "other")
        if not _is_tensor(a) and not _is_tensor(b):
            return None
        like = a if _is_tensor(a) else b

        def number(x):
            if not isinstance(x, (bool, int, float)):
                return None
            exact = torch.tensor(x, dtype=cx.torch_dtype(like))
            return cx.constant(exact if exact.item() == x else torch.tensor(x, dtype=torch.float64))

        operands = _binary_operands(cx, (a, b), number)
        return None if operands is None else cx.emit(type_, operands, {}, value)
    return handler


def _extreme(type_, reduce_type):
    """torch.max / torch.min: of two tensors elementwise (maximum, minimum), or of all elements (amax, ...);
    the (values, indices) form along a dim is not lowered."""
    def handler(cx, args, kwargs, value):
        other = _arg(args, kwargs, 1, "other")
        if other is None and not kwargs and len(args) == 1:
            return cx.emit(reduce_type, [args[0]], {}, value) if reduce_type else None
        if isinstance(other, (T, torch.Tensor)) and len(args) <= 2:
            return _compare(type_)(cx, [args[0], other], {}, value)
        return None
    return handler


def _norm(cx, args, kwargs, value):
    """torch.norm / Tensor.norm, the Euclidean (p = 2) form: sqrt(sum(x^2)) over the given dims. sqrt's
    gradient at 0 is infinite (times the zero gradient of x^2: NaN) where torch's norm gives 0: root_of_squares."""
    x, p, dim = args[0], _arg(args, kwargs, 1, "p", "fro"), _arg(args, kwargs, 2, "dim")
    keepdim = bool(_arg(args, kwargs, 3, "keepdim", False))
    if p not in (2, 2.0, "fro") or kwargs.get("dtype") is not None or not cx.torch_dtype(x).is_floating_point:
        return None
    squared = cx.emit("square", [x], {}, Meta(cx.shape(x), cx.torch_dtype(x)), suffix="square")
    attrs = {"keepdim": True} if keepdim else {}
    if dim is not None:
        attrs["dims"] = _dims(dim, cx.rank(x))
    total = cx.emit("sum", [squared], attrs, Meta(value.shape, value.dtype), suffix="sum")
    return root_of_squares(cx, total, value)


def root_of_squares(cx, total, value):
    """sqrt of a sum of squares `total`, 0 with no gradient where the sum is 0 (torch's norm's gradient at a zero
    vector), not sqrt's infinite slope times 0: NaN. A zero sum takes sqrt of 1 and the result 0 by two wheres."""
    shape, dtype = list(value.shape), value.dtype
    positive = cx.emit("gt", [total, cx.constant(torch.tensor(0.0, dtype=dtype))], {}, Meta(shape, torch.bool),
                       suffix="positive")
    safe = cx.emit("where", [positive, total, cx.constant(torch.tensor(1.0, dtype=dtype))], {}, Meta(shape, dtype),
                   suffix="safe")
    root = cx.emit("sqrt", [safe], {}, Meta(shape, dtype), suffix="root")
    return cx.emit("where", [positive, root, cx.constant(torch.tensor(0.0, dtype=dtype))], {}, value)


def _normalize(cx, args, kwargs, value):
    """F.normalize, p = 2: x / max(||x||, eps) along dim, as square, sum, clamp, sqrt and a division. The
    floor clamps the squared norm (eps^2), not the norm: sqrt's gradient at a zero row (a padded window's
    key) is infinite, so clamping after it gave NaN (0 x inf) where torch's gradient is 0; before it, the
    clamp stops the gradient and sqrt sees eps^2. max(sqrt(s), eps) = sqrt(max(s, eps^2)) up to rounding."""
    x, p, dim = args[0], _arg(args, kwargs, 1, "p", 2.0), _arg(args, kwargs, 2, "dim", 1)
    eps = float(_arg(args, kwargs, 3, "eps", 1e-12))
    if p not in (2, 2.0) or _arg(args, kwargs, 4, "out") is not None or not isinstance(dim, int):
        return None
    shape, dtype = cx.shape(x), cx.torch_dtype(x)
    axis = _dims(dim, len(shape))[0]
    reduced = tuple(1 if i == axis else n for i, n in enumerate(shape))
    squared = cx.emit("square", [x], {}, Meta(shape, dtype), suffix="square")
    total = cx.emit("sum", [squared], {"dims": [axis], "keepdim": True}, Meta(reduced, dtype), suffix="sum")
    floor = cx.emit("clamp", [total], {"min": eps * eps}, Meta(reduced, dtype), suffix="clamp")
    norm = cx.emit("sqrt", [floor], {}, Meta(reduced, dtype), suffix="norm")
    return cx.emit("div", [x, norm], {}, value)


def _repeat(cx, args, kwargs, value):
    """Tensor.repeat tiles x: a dim of size s > 1 repeated r > 1 times gets a new dim r before it, expanded
    and merged ((r s) varies r slowest); a size-1 dim (or a new leading one) is expanded in place, which
    keeps it splittable, e.g. a probe [1 1 h] repeated over the batch."""
    x = args[0]
    repeats = list(args[1]) if len(args) == 2 and isinstance(args[1], (tuple, list)) else list(args[1:])
    shape, dtype = cx.shape(x), cx.torch_dtype(x)
    if not all(isinstance(r, int) and r >= 1 for r in repeats) or len(repeats) < len(shape):
        return None
    if all(r == 1 for r in repeats) and len(repeats) == len(shape):
        return cx.alias(x, value)
    padded = [1] * (len(repeats) - len(shape)) + list(shape)
    spread, tiled = [], []
    for r, s in zip(repeats, padded):
        spread += [1, s] if r > 1 and s > 1 else [s]
        tiled += [r, s] if r > 1 and s > 1 else [r * s]
    current = x
    if spread != list(shape):
        current = cx.emit("reshape", [current], {"shape": spread}, Meta(spread, dtype), suffix="spread")
    if tiled == list(value.shape):
        return cx.emit("expand", [current], {"shape": tiled}, value)
    current = cx.emit("expand", [current], {"shape": tiled}, Meta(tiled, dtype), suffix="tile")
    return cx.emit("reshape", [current], {"shape": list(value.shape)}, value)


def _detach(cx, args, kwargs, value):
    return cx.emit("recycle_detach", [args[0]], {}, value)  # the registry's gradient-stopping identity


def _cumsum(cx, args, kwargs, value):
    """The engine's cumsum keeps floats and gives i64 for integers (as torch does); another dtype is a cast."""
    x, dim = args[0], _arg(args, kwargs, 1, "dim")
    if dim is None:
        return None
    scanned = cx.torch_dtype(x)
    result_dtype = scanned if scanned.is_floating_point else torch.int64
    if result_dtype == value.dtype:
        return cx.emit("cumsum", [x], {"dim": int(dim)}, value)
    summed = cx.emit("cumsum", [x], {"dim": int(dim)}, Meta(value.shape, result_dtype), suffix="cumsum")
    return cx.emit("cast", [summed], {"dtype": cx.dtype_name(value.dtype)}, value)


def _index_select(cx, args, kwargs, value):
    x, dim, index = args[0], _arg(args, kwargs, 1, "dim"), _arg(args, kwargs, 2, "index")
    return cx.emit("index_select", [cx.tensor(x), cx.tensor(index)], {"dim": int(dim)}, value)


def _pad(cx, args, kwargs, value):
    """F.pad in constant mode with non-negative pads (torch's order: last dim first)."""
    x, pads = args[0], _arg(args, kwargs, 1, "pad")
    mode, fill = _arg(args, kwargs, 2, "mode", "constant"), _arg(args, kwargs, 3, "value")
    if mode != "constant" or any(int(p) < 0 for p in pads):
        return None
    if all(int(p) == 0 for p in pads):
        return cx.alias(x, value)
    attrs = {"pads": [int(p) for p in pads]}
    if fill:
        attrs["value"] = float(fill)
    return cx.emit("pad", [x], attrs, value)


def _interpolate(cx, args, kwargs, value):
    """F.interpolate of [n c h w]: nearest-neighbour up-sampling by one integer factor, or bilinear
    resizing to any size (not antialiased; a scale_factor must give the output size exactly, since
    torch then maps coordinates with the factor rather than the sizes' ratio)."""
    x = args[0]
    scale = _arg(args, kwargs, 2, "scale_factor")
    mode, align = _arg(args, kwargs, 3, "mode", "nearest"), _arg(args, kwargs, 4, "align_corners")
    recompute, antialias = _arg(args, kwargs, 5, "recompute_scale_factor"), _arg(args, kwargs, 6, "antialias", False)
    if cx.rank(x) != 4 or antialias:
        return None
    (h, w), (oh, ow) = cx.shape(x)[2:], tuple(value.shape[2:])
    if mode == "bilinear":
        if scale is not None and not recompute:
            factors = scale if isinstance(scale, (tuple, list)) else (scale, scale)
            if h * factors[0] != oh or w * factors[1] != ow:
                return None
        attrs = {"output_size": [oh, ow]}
        if align:
            attrs["align_corners"] = True
        return cx.emit("upsample_bilinear2d", [x], attrs, value)
    if mode != "nearest" or oh % h or ow % w or oh // h != ow // w:
        return None
    if oh == h:
        return cx.alias(x, value)
    return cx.emit("upsample_nearest2d", [x], {"scale": oh // h}, value)


def _shape_only(empty=False):
    """zeros_like, new_zeros, ...: the values do not depend on the input's, so the result is a constant
    (zeros for the empty_like family, whose values are undefined, so the graph stays deterministic)."""
    def handler(cx, args, kwargs, value):
        if not isinstance(value, torch.Tensor):
            return None
        return cx.constant(torch.zeros_like(value) if empty else value)
    return handler
