"""The ATen handler table: torch.export's operators (capture="export") mapped onto the torch-level handlers.

An ATen op reaches its handler with its arguments named by the op's schema (defaults filled in), then
passed in the form the torch-level handler reads (`F.linear(x, w, b)`, `torch.softmax(x, dim, dtype=)`),
so each registry mapping is written once. Ops that only restate a layout (clone, alias, contiguous) are
the same tensor; conversions are casts where the dtype changes. Ops computing only from constants never
get here: the capture evaluates them (positions, masks, rotary tables) and the lowering folds them.
"""

import math

import torch

from .aten_attention import _sdpa_general
from .aten_complex import _complex_mul, _fft_c2c, _fft_r2c, _to_complex, _view_as_complex, _view_as_real
from .aten_masked import index_masked, is_mask, mask_of_columns, nonzero
from .aten_math import (
    _bernoulli_keep, _bitwise_and, _constant_pad, _hardtanh, _index_put_masked, _logical_or, _remainder, _upsample,
)
from .aten_norms import _native_group_norm, _var, _vector_norm
from .aten_strided import as_strided, flip, unfold
from .base import Meta, T
from .compute import (
    _addmm, _baddbmm, _binary, _cross_entropy, _dropout, _einsum, _embedding, _gather, _gelu, _layer_norm, _linear,
    _logical_and, _matmul, _mse_loss, _nll_loss, _pow, _rms_norm, _rsub, _sdpa, _softmax, _stack, _unary,
)
from .vision import (
    _adaptive_avg_pool2d, _batch_norm, _conv1d, _conv2d, _pool2d,
)
from .shapes import (
    _chunk, _clamp, _compare, _concat, _contiguous, _convert, _cumsum, _detach, _expand, _getitem, _index_select,
    _masked_fill, _pad, _permute, _reduce, _repeat, _reshape, _shape_only, _split, _squeeze, _t, _transpose,
    _unsqueeze, _where,
)

aten = torch.ops.aten
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # ATen's reduction enum (at::Reduction)


def named_arguments(op, args, kwargs):
    """{schema argument name: value} of a call of ATen overload `op`, defaults filled in."""
    named = {}
    for k, argument in enumerate(op._schema.arguments):
        if k < len(args) and not argument.kwarg_only:
            named[argument.name] = args[k]
        elif argument.name in kwargs:
            named[argument.name] = kwargs[argument.name]
        else:
            named[argument.name] = argument.default_value if argument.has_default_value() else None
    return named


def _via(handler, positional, named=(), convert=None):
    """An ATen op lowered by a torch-level handler: `positional` schema names passed by position, `named`
    (torch keyword, schema name) pairs passed by keyword; `convert` rewrites the named arguments first."""
    def lower(cx, args, kwargs, value):
        a = named_arguments(cx.node.target, args, kwargs)
        if convert is not None:
            a = convert(a)
            if a is None:
                return None
        return handler(cx, [a.get(n) for n in positional], {key: a[n] for key, n in named if n in a}, value)
    return lower


def _first_of_tuple(handler, count):
    """An op returning (result, saved tensors for its backward): the result lowered, the rest not kept
    (the engine derives its own backward; reading them is reported as unsupported)."""
    def lower(cx, args, kwargs, value):
        result = handler(cx, args, kwargs, value[0])
        return None if result is None else (result,) + (None,) * (count - 1)
    return lower


def _reduction(a):
    return {**a, "reduction": _REDUCTIONS.get(a["reduction"])}


def _no_padding_index(a):
    return {**a, "padding_idx": None if a["padding_idx"] in (None, -1) else a["padding_idx"]}


def _no_rounding(a):
    return a if a.get("rounding_mode") is None else None


def _slice(cx, args, kwargs, value):
    a = named_arguments(cx.node.target, args, kwargs)
    dim = a["dim"] % cx.rank(args[0])
    return _getitem(cx, [args[0], (slice(None),) * dim + (slice(a["start"], a["end"], a["step"]),)], {}, value)


def _select(cx, args, kwargs, value):
    a = named_arguments(cx.node.target, args, kwargs)
    dim = a["dim"] % cx.rank(args[0])
    return _getitem(cx, [args[0], (slice(None),) * dim + (int(a["index"]),)], {}, value)


def _slice_scatter(cx, args, kwargs, value):
    """x with a slice of it written (torch.export's functional form of `x[:, a:b] = v` or an in-place op on a
    view): the fx route's write (Lowering.write)."""
    a = named_arguments(cx.node.target, args, kwargs)
    dim = a["dim"] % len(value.shape)
    return cx.write(a["self"], (slice(None),) * dim + (slice(a["start"], a["end"], a["step"]),), a["src"])


def _select_scatter(cx, args, kwargs, value):
    a = named_arguments(cx.node.target, args, kwargs)
    dim = a["dim"] % len(value.shape)
    return cx.write(a["self"], (slice(None),) * dim + (int(a["index"]),), a["src"])


def _copy(cx, args, kwargs, value):
    """copy(self, src): src's values in self's shape and dtype (torch.export's functional form of `x.copy_(src)`
    and of writes into new tensors)."""
    src = named_arguments(cx.node.target, args, kwargs)["src"]
    if not isinstance(src, T):  # self is traced, src not: the result is src's constant values
        return cx.constant(torch.broadcast_to(torch.as_tensor(src), value.shape).to(value.dtype).contiguous())
    if cx.torch_dtype(src) != value.dtype:
        src = cx.emit("cast", [src], {"dtype": cx.dtype_name(value.dtype)}, Meta(cx.shape(src), value.dtype),
                      suffix="cast")
    if list(cx.shape(src)) != list(value.shape):
        return cx.emit("expand", [src], {"shape": list(value.shape)}, value)
    return cx.alias(src, value)


def _squeeze_dims(cx, args, kwargs, value):
    a = named_arguments(cx.node.target, args, kwargs)
    dims = a.get("dim")
    if isinstance(dims, (list, tuple)):
        if len(dims) != 1:
            return None
        dims = dims[0]
    return _squeeze(cx, [a["self"]] + ([] if dims is None else [dims]), {}, value)


def _sdpa_grouped(cx, args, kwargs, value):
    """scaled_dot_product_attention; enable_gqa (k and v with fewer heads) is the registry op's own
    grouped-query form (hq = g * hk), so the flag is dropped. A mask the registry op does not take (computed
    boolean, or computed with causality or grouped heads) is spelled out (aten_attention._sdpa_general)."""
    a = named_arguments(cx.node.target, args, kwargs)
    plain = _sdpa(cx, [a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"], a["is_causal"]],
                  {"scale": a["scale"]}, value)
    return plain if plain is not None else _sdpa_general(cx, args, kwargs, value)


def _topk(cx, args, kwargs, value):
    """topk: (values, positions) as the registry's topk (src/ops/routing.cc), both outputs one op's."""
    a = named_arguments(cx.node.target, args, kwargs)
    attrs = {"k": int(a["k"]), "dim": int(a["dim"]), "largest": bool(a["largest"]), "sorted": bool(a["sorted"])}
    return cx.emit_many("topk", [cx.tensor(a["self"])], attrs, list(value))


def _index(cx, args, kwargs, value):
    """x[..., i, j, ...] with integer index tensors on consecutive dims (a router's expert ids picking expert
    weights, transformers' batched_mm experts; a classifier's last token, x[arange(b), last]): the indexed dims
    merged into one, the indices combined into its row-major position (constant parts folded), and rows picked
    by index_select; the result reshaped to torch's. A boolean mask: aten_masked.py."""
    a = named_arguments(cx.node.target, args, kwargs)
    x, indices = cx.tensor(a["self"]), list(a["indices"])
    used = [d for d, index in enumerate(indices) if index is not None]
    if not used or used != list(range(used[0], used[-1] + 1)):
        return None
    picks = [indices[d] for d in used]
    if not all(isinstance(i, (T, torch.Tensor)) for i in picks):
        return None
    if any(is_mask(cx, i) for i in picks):
        return index_masked(cx, a["self"], indices, value)
    spelled = mask_of_columns(cx, list(cx.node.args[1]))  # x[mask.nonzero().unbind(1)]
    if spelled is not None:
        return index_masked(cx, a["self"], [None] * spelled[0] + [spelled[1]], value)
    dtypes = [cx.torch_dtype(i) if isinstance(i, T) else i.dtype for i in picks]
    if any(dtype not in (torch.int64, torch.int32) for dtype in dtypes):
        return None
    shape, first = list(cx.shape(x)), used[0]
    sizes = [shape[d] for d in used]
    positions = list(torch.broadcast_shapes(*[tuple(cx.shape(i)) if isinstance(i, T) else i.shape for i in picks]))
    index_meta = Meta(positions, torch.int64)
    constant, traced = torch.zeros(positions, dtype=torch.int64), []
    stride = math.prod(sizes)
    for pick, size in zip(picks, sizes):
        stride //= size
        if isinstance(pick, torch.Tensor):
            constant = constant + torch.remainder(pick.to(torch.int64), size) * stride
        elif stride == 1:
            traced.append(pick)
        else:
            traced.append(cx.emit("mul", [pick, cx.constant(torch.tensor(stride))], {},
                                  Meta(cx.shape(pick), cx.torch_dtype(pick)), suffix="stride"))
    if not traced:
        row = cx.constant(constant)
    else:
        row = traced[0]
        for term in traced[1:]:
            row = cx.emit("add", [row, term], {}, index_meta, suffix="position")
        if len(picks) > len(traced) or list(cx.shape(row)) != positions:
            row = cx.emit("add", [row, cx.constant(constant)], {}, index_meta, suffix="position")
    count = math.prod(positions)
    if len(positions) != 1:
        row = cx.emit("reshape", [row], {"shape": [count]}, Meta([count], cx.torch_dtype(row)), suffix="flat")
    merged = shape[:first] + [math.prod(sizes)] + shape[used[-1] + 1:]
    if len(used) > 1:
        x = cx.emit("reshape", [x], {"shape": merged}, Meta(merged, value.dtype), suffix="merged")
    picked = merged[:first] + [count] + merged[first + 1:]
    if picked == list(value.shape):
        return cx.emit("index_select", [x, row], {"dim": first}, value)
    out = cx.emit("index_select", [x, row], {"dim": first}, Meta(picked, value.dtype), suffix="select")
    return cx.emit("reshape", [out], {"shape": list(value.shape)}, value)


def _argmax(cx, args, kwargs, value):
    """argmax over one dim, or over the flattened tensor (the registry's argmax, i64)."""
    x, dim, keepdim = args
    attrs = ({} if dim is None else {"dim": int(dim)}) | ({"keepdim": True} if keepdim else {})
    return cx.emit("argmax", [x], attrs, value)


def _log1p(cx, args, kwargs, value):
    """log(1 + x), spelled with the registry's add and log."""
    x = args[0]
    one = cx.constant(torch.tensor(1.0, dtype=cx.torch_dtype(x)))
    grown = cx.emit("add", [x, one], {}, Meta(cx.shape(x), cx.torch_dtype(x)), suffix="plus1")
    return cx.emit("log", [grown], {}, value)


def _expm1(cx, args, kwargs, value):
    """exp(x) - 1, spelled with the registry's exp and sub."""
    x = args[0]
    one = cx.constant(torch.tensor(1.0, dtype=cx.torch_dtype(x)))
    grown = cx.emit("exp", [x], {}, Meta(cx.shape(x), cx.torch_dtype(x)), suffix="exp")
    return cx.emit("sub", [grown, one], {}, value)


def _bitwise_not(cx, args, kwargs, value):
    """~mask of a boolean tensor: eq(mask, false)."""
    x = args[0]
    if not isinstance(x, T) or cx.torch_dtype(x) != torch.bool:
        return None
    return cx.emit("eq", [x, cx.constant(torch.tensor(False))], {}, value)


def _max_dim(cx, args, kwargs, value):
    """max(x, dim) -> (values, indices): amax and argmax over the dim."""
    a = named_arguments(cx.node.target, args, kwargs)
    x, dim, keepdim = cx.tensor(a["self"]), int(a["dim"]), bool(a["keepdim"])
    keep = {"keepdim": True} if keepdim else {}
    values = cx.emit("amax", [x], {"dims": [dim], **keep}, value[0], suffix="values")
    return values, cx.emit("argmax", [x], {"dim": dim, **keep}, value[1], suffix="indices")


def _scatter_src(cx, a, value):
    """x.scatter(dim, index, src) (Llama 4's router: the top-k scores scattered into -inf): per position j of
    the index along dim (k of them, a top-k's k), where(index[j] == arange(size) along dim, src[j], x), later
    positions written over earlier ones."""
    x, index, src = cx.tensor(a["self"]), a["index"], a["src"]
    if not isinstance(index, T) or a.get("reduce") is not None or not isinstance(src, (T, torch.Tensor)):
        return None
    shape, index_shape = list(cx.shape(x)), list(cx.shape(index))
    dim = int(a["dim"]) % len(shape)
    src_shape = list(cx.shape(src)) if isinstance(src, T) else list(src.shape)
    if len(index_shape) != len(shape) or src_shape != index_shape or any(
            index_shape[d] != shape[d] for d in range(len(shape)) if d != dim):
        return None
    slots = cx.constant(torch.arange(shape[dim]).reshape([1] * dim + [shape[dim]] + [1] * (len(shape) - dim - 1)))
    current = x
    for j in range(index_shape[dim]):
        pick = (slice(None),) * dim + (slice(j, j + 1),)
        one = index_shape[:dim] + [1] + index_shape[dim + 1:]
        index_j = _getitem(cx, [index, pick], {}, Meta(one, cx.torch_dtype(index)))
        src_j = _getitem(cx, [src, pick], {}, Meta(one, value.dtype))
        hot = cx.emit("eq", [index_j, slots], {}, Meta(shape, torch.bool), suffix=f"hot{j}")
        last = j == index_shape[dim] - 1
        current = cx.emit("where", [hot, cx.tensor(src_j), current], {}, value if last else Meta(shape, value.dtype),
                          suffix=None if last else f"written{j}")
    return current


def _scatter_value(cx, args, kwargs, value):
    """x.scatter(dim, index, v) with a number v (group-limited routers' masks, `mask.scatter_(1, top_groups, 1)`):
    a one-hot of the index along a new last dim (eq with arange), summed over the index's own positions along
    dim, marks where v goes; where(marked, v, x)."""
    a = named_arguments(cx.node.target, args, kwargs)
    if "src" in a:
        return _scatter_src(cx, a, value)
    x, index, fill = cx.tensor(a["self"]), a["index"], a.get("value")
    if not isinstance(index, T) or a.get("reduce") is not None or not isinstance(fill, (int, float, bool)):
        return None
    shape, index_shape = list(cx.shape(x)), list(cx.shape(index))
    dim = int(a["dim"]) % len(shape)
    if len(index_shape) != len(shape) or any(index_shape[d] != shape[d] for d in range(len(shape)) if d != dim):
        return None
    size = shape[dim]
    column = cx.emit("unsqueeze", [index], {"dim": len(index_shape)}, Meta(index_shape + [1], cx.torch_dtype(index)),
                     suffix="column")
    hot = cx.emit("eq", [column, cx.constant(torch.arange(size))], {}, Meta(index_shape + [size], torch.bool),
                  suffix="hot")
    counts = cx.emit("cast", [hot], {"dtype": "f32"}, Meta(index_shape + [size], torch.float32), suffix="counted")
    per_slot = index_shape[:dim] + index_shape[dim + 1:] + [size]  # summed over dim: [.., size] with dim moved last
    counts = cx.emit("sum", [counts], {"dims": [dim]}, Meta(per_slot, torch.float32), suffix="counts")
    if dim != len(shape) - 1:  # back to x's layout: the slot dim moves from last to `dim`
        order = list(range(dim)) + [len(shape) - 1] + list(range(dim, len(shape) - 1))
        counts = cx.emit("permute", [counts], {"dims": order}, Meta(shape, torch.float32), suffix="placed")
    marked = cx.emit("gt", [counts, cx.constant(torch.tensor(0.0))], {}, Meta(shape, torch.bool), suffix="marked")
    return cx.emit("where", [marked, cx.constant(torch.tensor(fill, dtype=value.dtype)), x], {}, value)


def _convolution(cx, args, kwargs, value):
    """aten.convolution: a 1-D or 2-D convolution (not transposed) by the torch-level conv handlers."""
    a = named_arguments(cx.node.target, args, kwargs)
    if a["transposed"]:
        return None
    lower = {3: _conv1d, 4: _conv2d}.get(cx.rank(cx.tensor(a["input"])))
    if lower is None:
        return None
    return lower(cx, [a["input"], a["weight"], a["bias"], a["stride"], a["padding"], a["dilation"], a["groups"]],
                 {}, value)


_SAME = lambda cx, args, kwargs, value: _contiguous(cx, args[:1], {}, value)  # noqa: E731: layout only
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div"}
_UNARY = ("neg", "tanh", "sigmoid", "exp", "log", "sqrt", "rsqrt", "abs", "relu", "silu", "square", "reciprocal",
          "acos")
_COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "minimum": "minimum",
            "maximum": "maximum"}

_PACKETS = {
    **{getattr(aten, name): _via(_binary(type_), ("self", "other"), (("alpha", "alpha"),),
                                 _no_rounding if name == "div" else None) for name, type_ in _BINARY.items()},
    aten.mul: _complex_mul(_via(_binary("mul"), ("self", "other"))),
    aten.view_as_complex: _view_as_complex, aten.view_as_real: _view_as_real,
    aten.rsub: _via(_rsub, ("self", "other"), (("alpha", "alpha"),)),
    **{getattr(aten, name): _via(_unary(name), ("self",)) for name in _UNARY},
    aten.pow: _via(_pow, ("self", "exponent")),
    aten.gelu: _via(_gelu, ("self",), (("approximate", "approximate"),)),
    aten.softmax: _via(_softmax("softmax"), ("self", "dim"), (("dtype", "dtype"),)),
    aten._softmax: _via(_softmax("softmax"), ("self", "dim")),
    aten.log_softmax: _via(_softmax("log_softmax"), ("self", "dim"), (("dtype", "dtype"),)),
    aten._log_softmax: _via(_softmax("log_softmax"), ("self", "dim")),
    aten.dropout: _via(_dropout, ("input", "p", "train")),
    aten.native_dropout: _first_of_tuple(_via(_dropout, ("input", "p", "train")), 2),
    # Training batch norm: (out, saved mean, saved rstd, running mean and var after the step); the handler writes
    # the running statistics' updates itself (export's buffer mutations, tracer_lowering.py).
    aten._native_batch_norm_legit_functional: _first_of_tuple(_via(_batch_norm, (
        "input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")), 5),
    # Batch norm with no running statistics (.no_stats: Bit's weight standardization normalizes each conv
    # filter as F.batch_norm(weight [1, out, rest], None, None, training=True)): (out, saved mean, saved rstd).
    aten._native_batch_norm_legit: _first_of_tuple(_via(_batch_norm, (
        "input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")), 3),
    aten.linear: _via(_linear, ("input", "weight", "bias")),
    aten.addmm: _via(_addmm, ("self", "mat1", "mat2"), (("beta", "beta"), ("alpha", "alpha"))),
    aten.baddbmm: _via(_baddbmm, ("self", "batch1", "batch2"), (("beta", "beta"), ("alpha", "alpha"))),
    aten.mm: _via(_matmul, ("self", "mat2")), aten.bmm: _via(_matmul, ("self", "mat2")),
    aten.matmul: _via(_matmul, ("self", "other")),
    aten.einsum: _via(_einsum, ("equation", "tensors")),
    aten.embedding: _via(_embedding, ("indices", "weight", "padding_idx"), convert=_no_padding_index),
    aten.layer_norm: _via(_layer_norm, ("input", "normalized_shape", "weight", "bias", "eps")),
    aten.native_layer_norm: _first_of_tuple(_via(_layer_norm, ("input", "normalized_shape", "weight", "bias",
                                                                "eps")), 3),
    aten.rms_norm: _via(_rms_norm, ("input", "normalized_shape", "weight", "eps")),
    aten.scaled_dot_product_attention: _sdpa_grouped,
    aten.cross_entropy_loss: _via(_cross_entropy, ("self", "target"), (
        ("weight", "weight"), ("reduction", "reduction"), ("ignore_index", "ignore_index"),
        ("label_smoothing", "label_smoothing")), convert=_reduction),
    aten.nll_loss: _via(_nll_loss, ("self", "target"), (("weight", "weight"), ("reduction", "reduction"),
                                                         ("ignore_index", "ignore_index")), convert=_reduction),
    aten.nll_loss_nd: _via(_nll_loss, ("self", "target"), (("weight", "weight"), ("reduction", "reduction"),
                                                            ("ignore_index", "ignore_index")), convert=_reduction),
    aten.nll_loss_forward: _first_of_tuple(_via(_nll_loss, ("self", "target"), (
        ("weight", "weight"), ("reduction", "reduction"), ("ignore_index", "ignore_index")), convert=_reduction), 2),
    aten.mse_loss: _via(_mse_loss, ("self", "target"), (("reduction", "reduction"),), convert=_reduction),
    aten.view: _via(_reshape("view"), ("self",)), aten._unsafe_view: _via(_reshape("view"), ("self",)),
    aten.reshape: _via(_reshape("reshape"), ("self",)),
    aten.permute: _via(_permute, ("self", "dims")),
    aten.transpose: _via(_transpose, ("self", "dim0", "dim1")), aten.t: _via(_t, ("self",)),
    aten.expand: _via(_expand, ("self",)),
    aten.slice: _slice, aten.select: _select, aten.slice_scatter: _slice_scatter,
    aten.select_scatter: _select_scatter, aten.copy: _copy,
    aten.unsqueeze: _via(_unsqueeze, ("self", "dim")), aten.squeeze: _squeeze_dims,
    aten.cat: _via(_concat, ("tensors", "dim")), aten.stack: _via(_stack, ("tensors", "dim")),
    aten.split: _via(_split, ("self", "split_size", "dim")),
    aten.split_with_sizes: _via(_split, ("self", "split_sizes", "dim")),
    aten.chunk: _via(_chunk, ("self", "chunks", "dim")),
    aten.to: _to_complex(_via(_convert, ("self",))), aten._to_copy: _to_complex(_via(_convert, ("self",))),
    aten._fft_c2c: _fft_c2c, aten._fft_r2c: _fft_r2c,
    aten.type_as: _via(_convert, ("self",)),
    aten.clone: _SAME, aten.contiguous: _SAME, aten.alias: _SAME, aten.lift_fresh_copy: _SAME,
    aten.detach: _via(_detach, ("self",)),
    aten.mean: _via(_reduce("mean"), ("self", "dim", "keepdim"), (("dtype", "dtype"),)),
    aten.sum: _via(_reduce("sum"), ("self", "dim", "keepdim"), (("dtype", "dtype"),)),
    aten.amax: _via(_reduce("amax"), ("self", "dim", "keepdim")),
    aten.where: _via(_where, ("condition", "self", "other")),
    aten.masked_fill: _via(_masked_fill, ("self", "mask", "value")),
    aten.clamp: _via(_clamp, ("self", "min", "max")),
    **{getattr(aten, name): _via(_compare(type_), ("self", "other")) for name, type_ in _COMPARE.items()},
    aten.min: _via(_compare("minimum"), ("self", "other")), aten.max: _via(_compare("maximum"), ("self", "other")),
    aten.logical_and: _via(_logical_and, ("self", "other")),
    aten.cumsum: _via(_cumsum, ("self", "dim")),
    aten.index_select: _via(_index_select, ("self", "dim", "index")),
    aten.gather: _via(_gather, ("self", "dim", "index")),
    aten.avg_pool2d: _via(_pool2d("avg_pool2d"), ("self", "kernel_size", "stride", "padding", "ceil_mode",
                                                   "count_include_pad"), (("divisor_override", "divisor_override"),)),
    aten.max_pool2d_with_indices: _first_of_tuple(_via(_pool2d("max_pool2d"), (
        "self", "kernel_size", "stride", "padding", "dilation", "ceil_mode")), 2),
    aten.adaptive_avg_pool2d: _via(_adaptive_avg_pool2d, ("self", "output_size")),
    aten._adaptive_avg_pool2d: _via(_adaptive_avg_pool2d, ("self", "output_size")),
    aten.repeat: _via(_repeat, ("self", "repeats")),
    aten.argmax: _via(_argmax, ("self", "dim", "keepdim")),
    aten.expm1: _expm1, aten.bitwise_not: _bitwise_not,
    aten.bitwise_and: _bitwise_and,
    aten.scatter: _scatter_value,
    aten.topk: _topk, aten.index: _index, aten.nonzero: nonzero,
    aten.as_strided: as_strided, aten.unfold: unfold, aten.flip: flip,
    aten.log1p: _log1p, aten.convolution: _convolution,
    aten.linalg_vector_norm: _vector_norm, aten.remainder: _remainder, aten.index_put: _index_put_masked,
    aten.bitwise_or: _logical_or, aten.logical_or: _logical_or,
    aten.hardtanh: _hardtanh, aten.native_group_norm: _native_group_norm, aten.bernoulli: _bernoulli_keep,
    aten.upsample_bilinear2d: _upsample("bilinear"), aten.upsample_nearest2d: _upsample("nearest"),
    aten.constant_pad_nd: _constant_pad, aten.var: _var,
    **{getattr(aten, name): _shape_only(empty=name.startswith(("empty", "new_empty")))
       for name in ("zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full",
                    "new_empty")},
}


def _by_overload(packets):
    """{ATen overload: handler} for every overload of each packet (add.Tensor and add.Scalar alike: the
    handler reads the arguments by name). aten.min / aten.max only in their two-tensor form."""
    table = {}
    for packet, handler in packets.items():
        for name in packet.overloads():
            table[getattr(packet, name)] = handler
    for reduction in (aten.min.default, aten.max.default, aten.min.dim, aten.max.dim):
        table.pop(reduction, None)
    table[aten.max.default] = _via(_reduce("amax"), ("self",))  # the whole tensor's maximum
    table[aten.max.dim] = _max_dim
    return table


ATEN = _by_overload(_PACKETS)
