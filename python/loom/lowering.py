"""From torch.fx nodes to the engine's registry ops (`loom ops` lists them; src/ops/*.cc their attributes).

A handler receives a Lowering context, the node's arguments with tensors replaced by engine tensor ids
(class T) and its concrete output value, and returns the lowered value: a T, a tuple of them, or None
when the node is not supported (it is then reported). Shapes are never computed here: every output
takes the recorded value's shape and the engine checks it against its own rules.
"""

import math
import operator

import torch
import torch.nn as nn
import torch.nn.functional as F


class T(int):
    """An engine tensor id (a dynamic value: it depends on the inputs or the parameters)."""


class Meta:
    """The shape and dtype of an output that no fx node holds (an op a handler adds on the way)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype


def _is_tensor(x):
    return isinstance(x, T)


# ------------------------------------------------------------------------------------------------
# Helpers the handlers share. `cx` is the Lowering (tracer.py): cx.emit(type, inputs, attrs, value),
# cx.constant(value) (a buffer tensor holding a non-traced tensor or scalar), cx.alias(t).


def _arg(args, kwargs, index, name, default=None):
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _dims(value, rank):
    dims = [value] if isinstance(value, int) else list(value)
    return [d + rank if d < 0 else d for d in dims]


def _scalar_operand(cx, x, like, value):
    """A constant operand of a binary op as a rank-0 buffer of the tensor operand's dtype."""
    return cx.constant(torch.tensor(x, dtype=cx.torch_dtype(like)))


def _binary(type_):
    def handler(cx, args, kwargs, value):
        a, b = args[0], args[1]
        if kwargs.get("alpha", 1) != 1:
            return None
        if not _is_tensor(a) and not _is_tensor(b):
            return None
        if type_ == "mul" and not _is_tensor(a) and isinstance(a, (int, float)):
            a, b = b, a  # c * x is x * c: a scale
        if not _is_tensor(a):
            a = cx.constant(a) if isinstance(a, torch.Tensor) else _scalar_operand(cx, a, b, value)
        if not _is_tensor(b):
            if type_ == "mul" and isinstance(b, (int, float)):
                return cx.emit("scale", [a], {"factor": float(b)}, value)
            if type_ == "div" and isinstance(b, (int, float)) and b != 0:
                return cx.emit("scale", [a], {"factor": 1.0 / float(b)}, value)
            b = cx.constant(b) if isinstance(b, torch.Tensor) else _scalar_operand(cx, b, a, value)
        return cx.emit(type_, [a, b], {}, value)
    return handler


def _rsub(cx, args, kwargs, value):
    return _binary("sub")(cx, [args[1], args[0]], kwargs, value)


def _unary(type_, **fixed):
    def handler(cx, args, kwargs, value):
        return cx.emit(type_, [args[0]], dict(fixed), value)
    return handler


def _pow(cx, args, kwargs, value):
    x, exponent = args[0], args[1]
    if not _is_tensor(x) or not isinstance(exponent, (int, float)):
        return None
    if exponent == 2:
        return cx.emit("square", [x], {}, value)
    return cx.emit("pow", [x], {"exponent": float(exponent)}, value)


def _gelu(cx, args, kwargs, value):
    approximate = kwargs.get("approximate", "none")
    return cx.emit("gelu", [args[0]], {} if approximate == "none" else {"approximate": approximate}, value)


def _softmax(type_):
    def handler(cx, args, kwargs, value):
        x, dim, dtype = args[0], _arg(args, kwargs, 1, "dim"), _arg(args, kwargs, 3, "dtype")
        if dim is None:
            return None
        if dtype is not None and dtype != cx.torch_dtype(x):  # torch casts the input first
            x = cx.emit("cast", [x], {"dtype": cx.dtype_name(dtype)}, Meta(cx.shape(x), dtype), suffix="cast")
        return cx.emit(type_, [x], {"dim": int(dim)}, value)
    return handler


def _dropout(cx, args, kwargs, value):
    p = float(_arg(args, kwargs, 1, "p", 0.5))
    training = _arg(args, kwargs, 2, "training", True)
    if p == 0 or not training:
        return cx.alias(args[0], value)
    return cx.emit("dropout", [args[0]], {"p": p}, value)


def _linear(cx, args, kwargs, value):
    x, w, b = args[0], _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")
    inputs = [x, w] + ([b] if b is not None else [])
    return cx.emit("linear", [cx.tensor(i) for i in inputs], {}, value)


def _matmul(cx, args, kwargs, value):
    return cx.emit("matmul", [cx.tensor(args[0]), cx.tensor(args[1])], {}, value)


def _addmm(cx, args, kwargs, value):
    # bias + a @ b (HuggingFace's Conv1D): a matmul, then the bias broadcast over the rows.
    if kwargs.get("beta", 1) != 1 or kwargs.get("alpha", 1) != 1:
        return None
    product = cx.emit("matmul", [cx.tensor(args[1]), cx.tensor(args[2])], {}, value, suffix="matmul")
    return cx.emit("add", [product, cx.tensor(args[0])], {}, value)


def _baddbmm(cx, args, kwargs, value):
    # beta * input + alpha * (b1 @ b2) (Bloom's ALiBi scores).
    bias, b1, b2 = args[0], _arg(args, kwargs, 1, "batch1"), _arg(args, kwargs, 2, "batch2")
    beta, alpha = float(kwargs.get("beta", 1)), float(kwargs.get("alpha", 1))
    product = cx.emit("bmm", [cx.tensor(b1), cx.tensor(b2)], {}, value, suffix="bmm")
    if alpha != 1:
        product = cx.emit("scale", [product], {"factor": alpha}, value, suffix="alpha")
    if beta == 0:
        return product
    bias = cx.tensor(bias)
    if beta != 1:
        bias = cx.emit("scale", [bias], {"factor": beta}, Meta(cx.shape(bias), cx.torch_dtype(bias)), suffix="beta")
    return cx.emit("add", [bias, product], {}, value)


def _einsum(cx, args, kwargs, value):
    equation, operands = args[0], args[1:]
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = operands[0]
    if not isinstance(equation, str) or "->" not in equation:
        return None  # the engine's einsum takes explicit outputs
    equation = equation.replace(" ", "")
    if "..." in equation:
        equation = _explicit_ellipsis(equation, [cx.rank(cx.tensor(t)) for t in operands])
        if equation is None:
            return None
    return cx.emit("einsum", [cx.tensor(t) for t in operands], {"equation": equation}, value)


def _explicit_ellipsis(equation, ranks):
    """'...qhd,...khd->...hqk' with operand ranks as letters the equation does not use (LongT5): the engine's
    einsum has no ellipsis. Only when every '...' stands for the same number of dims (no broadcasting)."""
    inputs, output = equation.split("->")
    terms = inputs.split(",")
    if len(terms) != len(ranks):
        return None
    counts = {rank - len(term.replace("...", "")) for term, rank in zip(terms, ranks) if "..." in term}
    if len(counts) != 1 or min(counts) < 0:
        return None
    spare = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in equation][:counts.pop()]
    return equation.replace("...", "".join(spare))


def _stack(cx, args, kwargs, value):
    tensors, dim = _arg(args, kwargs, 0, "tensors"), int(_arg(args, kwargs, 1, "dim", 0))
    dim = dim + len(value.shape) if dim < 0 else dim
    parts = []
    for k, t in enumerate(tensors):
        t = cx.tensor(t)
        parts.append(cx.emit("unsqueeze", [t], {"dim": dim}, cx.shape_after_unsqueeze(t, dim), suffix=f"unsqueeze{k}"))
    return cx.emit("concat", parts, {"dim": dim}, value)


def _group_norm(cx, args, kwargs, value):
    x, groups = args[0], int(_arg(args, kwargs, 1, "num_groups"))
    weight, bias = _arg(args, kwargs, 2, "weight"), _arg(args, kwargs, 3, "bias")
    eps = float(_arg(args, kwargs, 4, "eps", 1e-5))
    channels, dtype = cx.shape(x)[1], cx.torch_dtype(x)
    weight = cx.tensor(weight) if weight is not None else cx.constant(torch.ones(channels, dtype=dtype))
    bias = cx.tensor(bias) if bias is not None else cx.constant(torch.zeros(channels, dtype=dtype))
    return cx.emit("group_norm", [x, weight, bias], {"groups": groups, "eps": eps}, value)


def _embedding(cx, args, kwargs, value):
    ids, weight = args[0], args[1]
    padding_idx = _arg(args, kwargs, 2, "padding_idx")
    attrs = {} if padding_idx is None else {"padding_idx": int(padding_idx)}
    return cx.emit("embedding", [ids, cx.tensor(weight)], attrs, value)


def _layer_norm(cx, args, kwargs, value):
    x, shape = args[0], _arg(args, kwargs, 1, "normalized_shape")
    weight, bias = _arg(args, kwargs, 2, "weight"), _arg(args, kwargs, 3, "bias")
    eps = float(_arg(args, kwargs, 4, "eps", 1e-5))
    if len(shape) != 1:
        return None  # the engine's layer_norm normalizes the last dim
    if weight is None:  # elementwise_affine=False: the engine's layer_norm has a weight, here ones
        weight = torch.ones(cx.shape(x)[-1], dtype=cx.torch_dtype(x))
    inputs = [x, cx.tensor(weight)] + ([cx.tensor(bias)] if bias is not None else [])
    return cx.emit("layer_norm", inputs, {"eps": eps}, value)


def _rms_norm(cx, args, kwargs, value):
    x, shape, weight = args[0], _arg(args, kwargs, 1, "normalized_shape"), _arg(args, kwargs, 2, "weight")
    eps = _arg(args, kwargs, 3, "eps")
    if weight is None or len(shape) != 1:
        return None
    return cx.emit("rms_norm", [x, cx.tensor(weight)], {} if eps is None else {"eps": float(eps)}, value)


def _sdpa(cx, args, kwargs, value):
    q, k, v = _arg(args, kwargs, 0, "query"), _arg(args, kwargs, 1, "key"), _arg(args, kwargs, 2, "value")
    mask = _arg(args, kwargs, 3, "attn_mask")
    dropout = float(_arg(args, kwargs, 4, "dropout_p", 0.0))
    causal = bool(_arg(args, kwargs, 5, "is_causal", False))
    scale = _arg(args, kwargs, 6, "scale")
    if kwargs.get("enable_gqa", False):
        return None
    attrs = {"causal": causal, "scale": float(scale) if scale is not None else 1.0 / math.sqrt(value.shape[-1])}
    if dropout > 0:
        attrs["dropout"] = dropout
    inputs = [q, k, v]
    if mask is not None and _is_causal_mask(mask, value.shape[-2], cx.shape(k)[-2]):
        attrs["causal"], mask = True, None  # HuggingFace's traced models spell causality as a constant mask
    if mask is not None:
        if isinstance(mask, T) or mask.dtype == torch.bool:
            return None  # a boolean or computed mask: the engine takes an additive constant bias (or causal)
        inputs.append(cx.tensor(mask))
    return cx.emit("scaled_dot_product_attention", inputs, attrs, value)


def _is_causal_mask(mask, s, t):
    """A constant mask that keeps exactly the keys up to the query (top-left aligned, as is_causal): boolean
    True there, or additive 0 there and very negative elsewhere; every broadcast row alike."""
    if isinstance(mask, T) or not isinstance(mask, torch.Tensor) or s != t or tuple(mask.shape[-2:]) != (s, t):
        return False
    keep = torch.ones(s, t, dtype=torch.bool).tril()
    if mask.dtype == torch.bool:
        return bool(torch.all(mask == keep))
    if not mask.dtype.is_floating_point:
        return False
    return bool(torch.all((mask == 0) == keep)) and bool(torch.all(mask.masked_fill(keep, -torch.inf) <= -1e4))


def _loss(cx, type_, inputs, attrs, value):
    """The engine's losses are f32 scalars (src/ops/loss.cc); torch's has its inputs' dtype: a float64
    model's loss is the f32 loss cast to float64, as the engine computes it."""
    if not isinstance(value, torch.Tensor) or value.dtype == torch.float32:
        return cx.emit(type_, inputs, attrs, value)
    loss = cx.emit(type_, inputs, attrs, Meta(value.shape, torch.float32), suffix="f32")
    return cx.emit("cast", [loss], {"dtype": cx.dtype_name(value.dtype)}, value)


def _cross_entropy(cx, args, kwargs, value):
    logits, labels = args[0], cx.tensor(args[1])
    if kwargs.get("reduction", "mean") != "mean" or kwargs.get("weight") is not None:
        return None
    attrs = {"ignore_index": int(kwargs.get("ignore_index", -100))}  # torch's default, -100, spelled out
    if kwargs.get("label_smoothing", 0.0):
        attrs["label_smoothing"] = float(kwargs["label_smoothing"])
    return _loss(cx, "cross_entropy", [logits, labels], attrs, value)


def _nll_loss(cx, args, kwargs, value):
    log_probs, labels = args[0], cx.tensor(_arg(args, kwargs, 1, "target"))
    if kwargs.get("reduction", "mean") != "mean" or kwargs.get("weight") is not None \
            or any(kwargs.get(k) is not None for k in ("size_average", "reduce")):
        return None
    return _loss(cx, "nll_loss", [log_probs, labels], {"ignore_index": int(kwargs.get("ignore_index", -100))}, value)


def _gather(cx, args, kwargs, value):
    """torch.gather(x, dim, index) with a constant index (ProphetNet's relative-position buckets): a one-hot
    mask of the index along a new last dim, where(mask, x, 0) summed over it; exact (the sum adds zeros)."""
    x, dim, index = args[0], _arg(args, kwargs, 1, "dim"), _arg(args, kwargs, 2, "index")
    if not _is_tensor(x) or not isinstance(index, torch.Tensor) or kwargs.get("sparse_grad") \
            or index.dim() != cx.rank(x):
        return None
    shape, dtype = cx.shape(x), cx.torch_dtype(x)
    dim = dim + len(shape) if dim < 0 else dim
    size = shape[dim]
    if any(index.shape[d] != shape[d] for d in range(len(shape)) if d != dim):
        return None  # torch also reads a smaller index's box of x; not needed so far
    hot = index.unsqueeze(-1) == torch.arange(size)  # [index's shape.., size]: where each output reads
    moved = _move_last(cx, x, dim)  # [.. without dim .., size]
    spread_shape = list(cx.shape(moved))
    spread_shape.insert(dim, 1)
    spread = cx.emit("unsqueeze", [moved], {"dim": dim}, Meta(spread_shape, dtype), suffix="spread")
    picked_shape = list(index.shape) + [size]
    picked = cx.emit("where", [cx.constant(hot), spread, cx.constant(torch.tensor(0.0, dtype=dtype))], {},
                     Meta(picked_shape, dtype), suffix="picked")
    return cx.emit("sum", [picked], {"dims": [len(picked_shape) - 1]}, value)


def _move_last(cx, x, dim):
    rank = cx.rank(x)
    if dim == rank - 1:
        return x
    order = [d for d in range(rank) if d != dim] + [dim]
    shape = [cx.shape(x)[d] for d in order]
    return cx.emit("permute", [x], {"dims": order}, Meta(shape, cx.torch_dtype(x)), suffix="moved")


def _fill_(cx, args, kwargs, value):
    """x.fill_(v): x's new value is constant (ProphetNet's targets, new zeros filled with -100); later
    readers of x read it, as they would in torch."""
    fill = _arg(args, kwargs, 1, "value")
    if not isinstance(fill, (bool, int, float)) or not isinstance(value, torch.Tensor):
        return None
    filled = cx.constant(torch.full(value.shape, fill, dtype=value.dtype))  # not value: later writes reach it
    written = cx.node.args[0]
    if hasattr(cx, "lowered") and written in cx.lowered:
        cx.lowered[written] = filled
    return filled


# Ops whose result may share storage with their input: an in-place write to it would change that input.
_MAY_ALIAS = {"view", "reshape", "flatten", "permute", "transpose", "t", "unsqueeze", "squeeze", "expand",
              "expand_as", "view_as", "reshape_as", "split", "chunk", "contiguous", "to", "type", "type_as",
              "float", "narrow", "select", "unbind", "as_strided", "detach", "__getitem__", "getitem"}


def _add_(cx, args, kwargs, value):
    """x.add_(y) where x is a traced op's result: the sum out of place, and x's later readers read it, as
    they would in torch. Refused where the write would reach another tensor: x a parameter, an input or a
    view of one (its base would change too); and where x is a constant (MusicGen Melody's `loss = zeros;
    loss += ...`): the recording run's add_ wrote into that constant, so its value is no longer the one
    the model starts from."""
    written = cx.node.args[0]
    source = getattr(written, "target", None)
    name = source if isinstance(source, str) else getattr(source, "__name__", "")
    if not _is_tensor(args[0]) or not hasattr(written, "op") or written.op in ("placeholder", "get_attr") \
            or name in _MAY_ALIAS:
        return None
    result = _binary("add")(cx, args, kwargs, value)
    if result is not None and hasattr(cx, "lowered") and written in cx.lowered:
        cx.lowered[written] = result
    return result


def _mse_loss(cx, args, kwargs, value):
    if kwargs.get("reduction", "mean") != "mean":
        return None
    return _loss(cx, "mse_loss", [cx.tensor(args[0]), cx.tensor(args[1])], {}, value)


# Vision (src/ops/conv_pool.cc, norm.cc): NCHW images; attributes as [height, width] pairs.
def _pair(value):
    return [int(v) for v in value] if isinstance(value, (tuple, list)) else [int(value), int(value)]


def _conv2d(cx, args, kwargs, value):
    x, weight, bias = args[0], _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")
    stride, padding = _arg(args, kwargs, 3, "stride", 1), _arg(args, kwargs, 4, "padding", 0)
    dilation, groups = _arg(args, kwargs, 5, "dilation", 1), int(_arg(args, kwargs, 6, "groups", 1))
    if cx.rank(x) != 4:
        return None  # an unbatched image [c h w]
    kernel = list(cx.shape(cx.tensor(weight))[2:])
    if padding == "valid":
        padding = 0
    elif padding == "same":  # symmetric only: an even reach would pad one side more
        reach = [d * (k - 1) for d, k in zip(_pair(dilation), kernel)]
        if any(r % 2 for r in reach):
            return None
        padding = [r // 2 for r in reach]
    attrs = {"stride": _pair(stride), "padding": _pair(padding), "dilation": _pair(dilation)}
    if groups != 1:
        attrs["groups"] = groups
    inputs = [x, cx.tensor(weight)] + ([cx.tensor(bias)] if bias is not None else [])
    return cx.emit("conv2d", inputs, attrs, value)


def _conv1d(cx, args, kwargs, value):
    """A 1-D convolution of [n c l] as the engine's conv2d of [n c 1 l] (Mamba's depthwise causal conv):
    the input and the weight [co ci/g k] get a unit height, the result loses it."""
    x, weight, bias = args[0], cx.tensor(_arg(args, kwargs, 1, "weight")), _arg(args, kwargs, 2, "bias")
    stride, padding = _arg(args, kwargs, 3, "stride", 1), _arg(args, kwargs, 4, "padding", 0)
    dilation, groups = _arg(args, kwargs, 5, "dilation", 1), int(_arg(args, kwargs, 6, "groups", 1))
    one = lambda v: v[0] if isinstance(v, (tuple, list)) else v  # noqa: E731: conv1d's tuples have one entry
    if cx.rank(x) != 3 or isinstance(padding, str):
        return None
    planar = cx.emit("unsqueeze", [x], {"dim": 2}, cx.shape_after_unsqueeze(x, 2), suffix="planar")
    kernel = cx.emit("unsqueeze", [weight], {"dim": 2}, cx.shape_after_unsqueeze(weight, 2), suffix="kernel")
    attrs = {"stride": [1, int(one(stride))], "padding": [0, int(one(padding))], "dilation": [1, int(one(dilation))]}
    if groups != 1:
        attrs["groups"] = groups
    inputs = [planar, kernel] + ([cx.tensor(bias)] if bias is not None else [])
    shape = list(value.shape)
    out = cx.emit("conv2d", inputs, attrs, Meta(shape[:2] + [1] + shape[2:], value.dtype), suffix="conv2d")
    return cx.emit("squeeze", [out], {"dim": 2}, value)


def _module_conv1d(cx, m, args, kwargs, value):
    if m.padding_mode != "zeros":
        return None
    return _conv1d(cx, [args[0], m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups], {}, value)


def _softplus(cx, args, kwargs, value):
    """F.softplus as torch computes it: x where beta x > threshold, else log(1 + exp(beta x)) / beta; the
    exponent is clamped at the threshold, so the branch not taken never overflows (nor its gradient)."""
    x = args[0]
    beta, threshold = float(_arg(args, kwargs, 1, "beta", 1.0)), float(_arg(args, kwargs, 2, "threshold", 20.0))
    meta = Meta(cx.shape(x), cx.torch_dtype(x))
    scaled = cx.emit("scale", [x], {"factor": beta}, meta, suffix="beta") if beta != 1 else x
    capped = cx.emit("clamp", [scaled], {"max": threshold}, meta, suffix="capped")
    grown = cx.emit("exp", [capped], {}, meta, suffix="exp")
    one = cx.constant(torch.tensor(1.0, dtype=cx.torch_dtype(x)))
    soft = cx.emit("log", [cx.emit("add", [grown, one], {}, meta, suffix="plus1")], {}, meta, suffix="log")
    if beta != 1:
        soft = cx.emit("scale", [soft], {"factor": 1.0 / beta}, meta, suffix="unbeta")
    limit = cx.constant(torch.tensor(threshold, dtype=cx.torch_dtype(x)))
    linear = cx.emit("gt", [scaled, limit], {}, Meta(cx.shape(x), torch.bool), suffix="linear")
    return cx.emit("where", [linear, x, soft], {}, value)


def _logical_and(cx, args, kwargs, value):
    """a & b of boolean tensors: where(a, b, a), false wherever a is."""
    a, b = args[0], args[1]
    if any(isinstance(v, (T, torch.Tensor)) and (cx.torch_dtype(v) if isinstance(v, T) else v.dtype) != torch.bool
           for v in (a, b)) or not all(isinstance(v, (T, torch.Tensor)) for v in (a, b)):
        return None
    a, b = cx.tensor(a), cx.tensor(b)
    return cx.emit("where", [a, b, a], {}, value)


def _hardswish(cx, args, kwargs, value):
    """x * relu6(x + 3) / 6 (LeViT, MobileNet V3)."""
    x = args[0]
    meta = Meta(cx.shape(x), cx.torch_dtype(x))
    shifted = cx.emit("add", [x, cx.constant(torch.tensor(3.0, dtype=cx.torch_dtype(x)))], {}, meta, suffix="plus3")
    gate = cx.emit("clamp", [shifted], {"min": 0.0, "max": 6.0}, meta, suffix="relu6")
    return cx.emit("scale", [cx.emit("mul", [x, gate], {}, meta, suffix="gated")], {"factor": 1.0 / 6.0}, value)


def _batch_norm(cx, args, kwargs, value):
    """Training mode normalizes with the batch's statistics, as the engine's batch-norm parts
    (src/ops/batch_norm_parts.cc): per-channel sums over batch and space that a data-parallel plan
    all-reduces (SyncBatchNorm's statistics), then the normalization from the sums, so a plan that splits
    the batch trains as one device. The running statistics torch updates on the side are not part of the
    gradient and are not traced: the engine leaves running_mean / running_var as they were."""
    x, weight, bias = args[0], _arg(args, kwargs, 3, "weight"), _arg(args, kwargs, 4, "bias")
    training, eps = _arg(args, kwargs, 5, "training", False), float(_arg(args, kwargs, 7, "eps", 1e-5))
    if not training:
        return None  # inference normalizes with the running statistics: no engine op says that
    channels = cx.shape(x)[1]
    dtype = cx.torch_dtype(x)
    weight = cx.tensor(weight) if weight is not None else cx.constant(torch.ones(channels, dtype=dtype))
    bias = cx.tensor(bias) if bias is not None else cx.constant(torch.zeros(channels, dtype=dtype))
    per_channel = Meta([channels], torch.float32)
    total, count = cx.emit_many("batch_norm_sums", [x], {}, [per_channel, per_channel], suffix="sums")
    squares = cx.emit("batch_norm_centered_sums", [x, total, count], {}, per_channel, suffix="squares")
    return cx.emit("batch_norm_from_sums", [x, total, squares, count, weight, bias], {"eps": eps}, value)


def _pool2d(type_):
    def handler(cx, args, kwargs, value):
        x, kernel = args[0], _arg(args, kwargs, 1, "kernel_size")
        stride, padding = _arg(args, kwargs, 2, "stride"), _arg(args, kwargs, 3, "padding", 0)
        if cx.rank(x) != 4 or isinstance(value, tuple):
            return None  # unbatched, or max pooling that returns its indices
        if type_ == "max_pool2d":
            dilation, ceil_mode = _arg(args, kwargs, 4, "dilation", 1), _arg(args, kwargs, 5, "ceil_mode", False)
            if _pair(dilation) != [1, 1] or ceil_mode:
                return None
        else:
            ceil_mode = _arg(args, kwargs, 4, "ceil_mode", False)
            include_pad = _arg(args, kwargs, 5, "count_include_pad", True)
            if kwargs.get("divisor_override") is not None:
                return None
            if ceil_mode or (not include_pad and _pair(padding) != [0, 0]):
                return _avg_pool2d_counted(cx, x, kernel, stride, padding, ceil_mode, include_pad, value)
        attrs = {"kernel": _pair(kernel), "padding": _pair(padding)}
        if stride is not None and (not isinstance(stride, (list, tuple)) or len(stride) > 0):
            attrs["stride"] = _pair(stride)
        return cx.emit(type_, [x], attrs, value)
    return handler


def _avg_pool2d_counted(cx, x, kernel, stride, padding, ceil_mode, include_pad, value):
    """Average pooling whose divisor is not the window's area (count_include_pad=False: PoolFormer; ceil_mode:
    EfficientNet): zeros padded after the input so that floor-mode windows reach as far as ceil mode's, the
    engine's avg_pool2d (a window's sum / area), then a constant factor per output position, area / torch's
    divisor, computed here by pooling ones both ways (0 where a window holds no input)."""
    kernel, padding = _pair(kernel), _pair(padding)
    stride = _pair(stride) if stride is not None and (not isinstance(stride, (list, tuple)) or stride) else kernel
    n, c, h, w = cx.shape(x)
    oh, ow = value.shape[-2:]
    extra = [max(0, (o - 1) * s + k - 2 * p - size)
             for o, s, k, p, size in zip((oh, ow), stride, kernel, padding, (h, w))]
    dtype = cx.torch_dtype(x)
    current = x
    if any(extra):
        current = cx.emit("pad", [x], {"pads": [0, extra[1], 0, extra[0]]},
                          Meta([n, c, h + extra[0], w + extra[1]], dtype), suffix="reach")
    pooled = cx.emit("avg_pool2d", [current], {"kernel": kernel, "padding": padding, "stride": stride},
                     Meta(value.shape, dtype), suffix="sum_over_area")
    ones = torch.ones(1, 1, h, w, dtype=torch.float64)
    wanted = F.avg_pool2d(ones, kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=include_pad)
    engine = F.avg_pool2d(F.pad(ones, [0, extra[1], 0, extra[0]]), kernel, stride, padding, count_include_pad=True)
    if tuple(wanted.shape[-2:]) != (oh, ow) or wanted.shape != engine.shape:
        return None
    factor = torch.where(engine > 0, wanted / engine.clamp_min(1e-30), torch.zeros_like(engine)).to(dtype)
    return cx.emit("mul", [pooled, cx.constant(factor)], {}, value)


def _adaptive_avg_pool2d(cx, args, kwargs, value):
    x = args[0]
    if cx.rank(x) != 4:
        return None
    return cx.emit("adaptive_avg_pool2d", [x], {"output_size": [int(s) for s in value.shape[-2:]]}, value)


# Shape ops. The target shape is the recorded output's: -1 and sizes computed from x.size() resolve.
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
        if kwargs.get("dtype") is not None:
            return None
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
    """torch.norm / Tensor.norm, the Euclidean (p = 2) form: sqrt(sum(x^2)) over the given dims."""
    x, p, dim = args[0], _arg(args, kwargs, 1, "p", "fro"), _arg(args, kwargs, 2, "dim")
    keepdim = bool(_arg(args, kwargs, 3, "keepdim", False))
    if p not in (2, 2.0, "fro") or kwargs.get("dtype") is not None or not cx.torch_dtype(x).is_floating_point:
        return None
    squared = cx.emit("square", [x], {}, Meta(cx.shape(x), cx.torch_dtype(x)), suffix="square")
    attrs = {"keepdim": True} if keepdim else {}
    if dim is not None:
        attrs["dims"] = _dims(dim, cx.rank(x))
    total = cx.emit("sum", [squared], attrs, Meta(value.shape, value.dtype), suffix="sum")
    return cx.emit("sqrt", [total], {}, value)


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


# ------------------------------------------------------------------------------------------------
# The tables. Functions and methods are looked up by the callable (call_function) or the method name
# (call_method); modules by type (call_module).

FUNCTIONS = {
    operator.add: _binary("add"), torch.add: _binary("add"),
    operator.sub: _binary("sub"), torch.sub: _binary("sub"), torch.rsub: _rsub,
    operator.mul: _binary("mul"), torch.mul: _binary("mul"),
    operator.truediv: _binary("div"), torch.div: _binary("div"),
    operator.neg: _unary("neg"), torch.neg: _unary("neg"),
    operator.pow: _pow, torch.pow: _pow,
    operator.matmul: _matmul, torch.matmul: _matmul, torch.bmm: _matmul, torch.addmm: _addmm,
    operator.getitem: _getitem,
    torch.tanh: _unary("tanh"), F.tanh: _unary("tanh"), torch.sigmoid: _unary("sigmoid"), F.sigmoid: _unary("sigmoid"),
    torch.exp: _unary("exp"), torch.log: _unary("log"), torch.sqrt: _unary("sqrt"), torch.rsqrt: _unary("rsqrt"),
    torch.abs: _unary("abs"), torch.square: _unary("square"),
    torch.relu: _unary("relu"), F.relu: _unary("relu"), F.silu: _unary("silu"), F.gelu: _gelu,
    torch.softmax: _softmax("softmax"), F.softmax: _softmax("softmax"),
    torch.log_softmax: _softmax("log_softmax"), F.log_softmax: _softmax("log_softmax"),
    F.dropout: _dropout, torch.dropout: _dropout,
    F.linear: _linear, F.embedding: _embedding, F.layer_norm: _layer_norm,
    F.scaled_dot_product_attention: _sdpa,
    F.cross_entropy: _cross_entropy, F.mse_loss: _mse_loss,
    torch.reshape: _reshape("reshape"), torch.flatten: _flatten, torch.permute: _permute,
    torch.transpose: _transpose, torch.t: _t, torch.unsqueeze: _unsqueeze, torch.squeeze: _squeeze,
    torch.split: _split, torch.chunk: _chunk, torch.cat: _concat, torch.concat: _concat,
    torch.masked_fill: _masked_fill, torch.where: _where, torch.clamp: _clamp,
    torch.sum: _reduce("sum"), torch.mean: _reduce("mean"), torch.amax: _reduce("amax"),
    F.conv1d: _conv1d, F.softplus: _softplus, F.hardswish: _hardswish, F.nll_loss: _nll_loss,
    torch.gather: _gather,
    operator.and_: _logical_and, torch.logical_and: _logical_and,
    getattr: _getattr, torch.clone: _contiguous, F.relu6: _unary("clamp", min=0.0, max=6.0),
    torch.baddbmm: _baddbmm, torch.einsum: _einsum, torch.stack: _stack, F.group_norm: _group_norm,
    F.conv2d: _conv2d, torch.conv2d: _conv2d, F.batch_norm: _batch_norm,
    F.max_pool2d: _pool2d("max_pool2d"), torch.max_pool2d: _pool2d("max_pool2d"),
    F.avg_pool2d: _pool2d("avg_pool2d"), F.adaptive_avg_pool2d: _adaptive_avg_pool2d,
    operator.eq: _compare("eq"), torch.eq: _compare("eq"), operator.ne: _compare("ne"), torch.ne: _compare("ne"),
    operator.lt: _compare("lt"), torch.lt: _compare("lt"), operator.le: _compare("le"), torch.le: _compare("le"),
    operator.gt: _compare("gt"), torch.gt: _compare("gt"), operator.ge: _compare("ge"), torch.ge: _compare("ge"),
    torch.cumsum: _cumsum, torch.index_select: _index_select, F.pad: _pad, F.interpolate: _interpolate,
    torch.zeros_like: _shape_only(), torch.ones_like: _shape_only(), torch.full_like: _shape_only(),
    torch.empty_like: _shape_only(empty=True),
    torch.maximum: _compare("maximum"), torch.minimum: _compare("minimum"), torch.max: _extreme("maximum", "amax"),
    torch.min: _extreme("minimum", None), torch.detach: _detach,
    torch.norm: _norm, F.normalize: _normalize,
}
if hasattr(F, "rms_norm"):
    FUNCTIONS[F.rms_norm] = _rms_norm

METHODS = {
    "add": _binary("add"), "sub": _binary("sub"), "mul": _binary("mul"), "div": _binary("div"),
    "neg": _unary("neg"), "pow": _pow, "matmul": _matmul, "bmm": _matmul,
    "tanh": _unary("tanh"), "sigmoid": _unary("sigmoid"), "exp": _unary("exp"), "log": _unary("log"),
    "sqrt": _unary("sqrt"), "rsqrt": _unary("rsqrt"), "abs": _unary("abs"), "relu": _unary("relu"),
    "softmax": _softmax("softmax"), "log_softmax": _softmax("log_softmax"),
    "view": _reshape("view"), "reshape": _reshape("reshape"), "flatten": _flatten, "permute": _permute,
    "transpose": _transpose, "t": _t, "unsqueeze": _unsqueeze, "squeeze": _squeeze, "expand": _expand,
    "split": _split, "chunk": _chunk, "contiguous": _contiguous,
    "to": _convert, "type": _convert, "type_as": _convert, "float": _convert, "half": _convert,
    "bfloat16": _convert, "double": _convert, "long": _convert, "int": _convert, "bool": _convert,
    "masked_fill": _masked_fill, "clamp": _clamp, "sum": _reduce("sum"), "mean": _reduce("mean"),
    "amax": _reduce("amax"), "baddbmm": _baddbmm, "clone": _contiguous,
    "expand_as": _like("expand"), "reshape_as": _like("reshape"), "view_as": _like("view"),
    "eq": _compare("eq"), "ne": _compare("ne"), "lt": _compare("lt"), "le": _compare("le"), "gt": _compare("gt"),
    "ge": _compare("ge"), "cumsum": _cumsum, "index_select": _index_select,
    "new_zeros": _shape_only(), "new_ones": _shape_only(), "new_full": _shape_only(),
    "new_empty": _shape_only(empty=True), "maximum": _compare("maximum"), "minimum": _compare("minimum"),
    "max": _extreme("maximum", "amax"), "min": _extreme("minimum", None), "detach": _detach, "norm": _norm,
    "fill_": _fill_, "gather": _gather, "add_": _add_,
    "repeat": _repeat,
}


def _module_linear(cx, m, args, kwargs, value):
    return _linear(cx, [args[0], m.weight, m.bias], {}, value)


def _module_embedding(cx, m, args, kwargs, value):
    if m.max_norm is not None:
        return None
    return _embedding(cx, [args[0], m.weight, m.padding_idx], {}, value)


def _module_layer_norm(cx, m, args, kwargs, value):
    return _layer_norm(cx, [args[0], m.normalized_shape, m.weight, m.bias, m.eps], {}, value)


def _module_rms_norm(cx, m, args, kwargs, value):
    return _rms_norm(cx, [args[0], m.normalized_shape, m.weight, m.eps], {}, value)


def _module_dropout(cx, m, args, kwargs, value):
    return _dropout(cx, [args[0], m.p, True], {}, value)


def _module_cross_entropy(cx, m, args, kwargs, value):
    return _cross_entropy(cx, [args[0], args[1]], {"ignore_index": m.ignore_index, "reduction": m.reduction,
                                                    "weight": m.weight, "label_smoothing": m.label_smoothing}, value)


def _module_mse(cx, m, args, kwargs, value):
    return _mse_loss(cx, args, {"reduction": m.reduction}, value)


def _module_softmax(type_):
    def handler(cx, m, args, kwargs, value):
        return _softmax(type_)(cx, [args[0], m.dim], {}, value)
    return handler


def _module_unary(type_, **fixed):
    def handler(cx, m, args, kwargs, value):
        return cx.emit(type_, [args[0]], dict(fixed), value)
    return handler


def _module_gelu(cx, m, args, kwargs, value):
    return _gelu(cx, [args[0]], {"approximate": m.approximate}, value)


def _module_identity(cx, m, args, kwargs, value):
    return cx.alias(args[0], value)


def _module_flatten(cx, m, args, kwargs, value):
    return _flatten(cx, [args[0], m.start_dim, m.end_dim], {}, value)


def _module_conv2d(cx, m, args, kwargs, value):
    if m.padding_mode != "zeros":
        return None
    return _conv2d(cx, [args[0], m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups], {}, value)


def _module_batch_norm(cx, m, args, kwargs, value):
    # nn.BatchNorm2d uses the batch's statistics in training mode, and when it tracks no running ones.
    training = m.training or not m.track_running_stats
    return _batch_norm(cx, [args[0], None, None, m.weight, m.bias, training, m.momentum, m.eps], {}, value)


def _module_batch_norm1d(cx, m, args, kwargs, value):
    """BatchNorm1d of [n c] or [n c l] (LeViT's) as the engine's batch_norm of [n c l 1]: the same
    statistics, per channel over all other dims."""
    x = args[0]
    shape = list(cx.shape(x))
    if len(shape) not in (2, 3):
        return None
    planar = shape + [1] * (4 - len(shape))
    meta = Meta(planar, cx.torch_dtype(x))
    lifted = cx.emit("reshape", [x], {"shape": planar}, meta, suffix="planar")
    normed = _module_batch_norm(cx, m, [lifted], {}, meta)
    return None if normed is None else cx.emit("reshape", [normed], {"shape": shape}, value)


def _module_max_pool2d(cx, m, args, kwargs, value):
    if m.return_indices:
        return None
    return _pool2d("max_pool2d")(cx, [args[0], m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode], {}, value)


def _module_avg_pool2d(cx, m, args, kwargs, value):
    return _pool2d("avg_pool2d")(cx, [args[0], m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad],
                                 {"divisor_override": m.divisor_override}, value)


def _module_group_norm(cx, m, args, kwargs, value):
    return _group_norm(cx, [args[0], m.num_groups, m.weight, m.bias, m.eps], {}, value)


def _module_zero_pad2d(cx, m, args, kwargs, value):
    return _pad(cx, [args[0], m.padding], {}, value)


def _module_adaptive_avg_pool1d(cx, m, args, kwargs, value):
    """Global average pooling of [n c l] (output size 1) is a mean over the last dim."""
    if m.output_size not in (1, (1,)):
        return None
    return cx.emit("mean", [args[0]], {"dims": [cx.rank(args[0]) - 1], "keepdim": True}, value)


def _module_adaptive_avg_pool2d(cx, m, args, kwargs, value):
    return _adaptive_avg_pool2d(cx, [args[0]], {}, value)


def _module_multihead_attention(cx, m, args, kwargs, value):
    """nn.MultiheadAttention (Siglip's pooling head), batch first, no masks, one in_proj: the in_proj
    weight's query, key and value rows as linears, heads split, scaled_dot_product_attention, out_proj.
    Returns (output, None): the averaged attention weights are not computed (a reader of them fails)."""
    query, key, val = (_arg(args, kwargs, i, n) for i, n in enumerate(("query", "key", "value")))
    masks = [_arg(args, kwargs, i, n) for i, n in ((3, "key_padding_mask"), (5, "attn_mask"))]
    if not m.batch_first or not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn \
            or any(x is not None for x in masks) or not isinstance(value, tuple):
        return None
    out_value = value[0]
    dtype, e, h = out_value.dtype, m.embed_dim, m.num_heads
    w, b = cx.tensor(m.in_proj_weight), cx.tensor(m.in_proj_bias) if m.in_proj_bias is not None else None
    heads = []
    for part, x in enumerate((query, key, val)):
        batch, length = cx.shape(x)[0], cx.shape(x)[1]
        rows = {"dim": 0, "start": part * e, "end": (part + 1) * e, "step": 1}
        wp = cx.emit("slice", [w], rows, Meta([e, e], dtype), suffix=f"w{part}")
        bp = cx.emit("slice", [b], rows, Meta([e], dtype), suffix=f"b{part}") if b is not None else None
        y = cx.emit("linear", [cx.tensor(x), wp] + ([bp] if bp is not None else []), {},
                    Meta([batch, length, e], dtype), suffix=f"proj{part}")
        y = cx.emit("reshape", [y], {"shape": [batch, length, h, e // h]}, Meta([batch, length, h, e // h], dtype),
                    suffix=f"heads{part}")
        heads.append(cx.emit("transpose", [y], {"dim0": 1, "dim1": 2}, Meta([batch, h, length, e // h], dtype),
                             suffix=f"t{part}"))
    batch, length = cx.shape(query)[0], cx.shape(query)[1]
    attrs = {"causal": False, "scale": 1.0 / math.sqrt(e // h)}
    if m.training and m.dropout > 0:
        attrs["dropout"] = float(m.dropout)
    att = cx.emit("scaled_dot_product_attention", heads, attrs, Meta([batch, h, length, e // h], dtype), suffix="sdpa")
    att = cx.emit("transpose", [att], {"dim0": 1, "dim1": 2}, Meta([batch, length, h, e // h], dtype), suffix="back")
    att = cx.emit("reshape", [att], {"shape": [batch, length, e]}, Meta([batch, length, e], dtype), suffix="merged")
    out = _linear(cx, [att, m.out_proj.weight, m.out_proj.bias], {}, out_value)
    return (out, None)


MODULES = [
    (nn.Linear, _module_linear),
    (nn.Embedding, _module_embedding),
    (nn.LayerNorm, _module_layer_norm),
    (nn.Dropout, _module_dropout),
    (nn.GELU, _module_gelu),
    (nn.ReLU, _module_unary("relu")),
    (nn.ReLU6, _module_unary("clamp", min=0.0, max=6.0)),
    (nn.SiLU, _module_unary("silu")),
    (nn.Tanh, _module_unary("tanh")),
    (nn.Sigmoid, _module_unary("sigmoid")),
    (nn.Softmax, _module_softmax("softmax")),
    (nn.LogSoftmax, _module_softmax("log_softmax")),
    (nn.Identity, _module_identity),
    (nn.Flatten, _module_flatten),
    (nn.CrossEntropyLoss, _module_cross_entropy),
    (nn.MultiheadAttention, _module_multihead_attention),
    (nn.MSELoss, _module_mse),
    (nn.Conv2d, _module_conv2d),
    (nn.Conv1d, _module_conv1d),
    (nn.BatchNorm1d, _module_batch_norm1d),
    (nn.Hardswish, lambda cx, m, args, kwargs, value: _hardswish(cx, args, {}, value)),
    (nn.Softplus, lambda cx, m, args, kwargs, value: _softplus(cx, [args[0], m.beta, m.threshold], {}, value)),
    (nn.BatchNorm2d, _module_batch_norm),
    (nn.GroupNorm, _module_group_norm),
    (nn.MaxPool2d, _module_max_pool2d),
    (nn.AvgPool2d, _module_avg_pool2d),
    (nn.AdaptiveAvgPool2d, _module_adaptive_avg_pool2d),
    (nn.ZeroPad2d, _module_zero_pad2d),
    (nn.AdaptiveAvgPool1d, _module_adaptive_avg_pool1d),
]
if hasattr(nn, "RMSNorm"):
    MODULES.append((nn.RMSNorm, _module_rms_norm))


# ------------------------------------------------------------------------------------------------
# Top-k mixture-of-experts blocks (Mixtral, OLMoE, Qwen2-MoE). HuggingFace routes tokens with
# torch.where over the expert mask: sizes that depend on the data, which no static graph holds. The block
# is traced whole (a leaf, capture.py) and lowered densely: the top-k selection as argmax rounds, each one
# masking its winner; a gate matrix [tokens, experts] holding each token's routing weight at its selected
# experts and 0 elsewhere; every expert on every token, weighted by its gate column, summed in expert order.
# The result is HuggingFace's (a token's terms are added in the same order; an unselected expert adds an
# exact 0), routing keeps its data dependence, and the gradient reaches the selected weights as through
# torch.topk. The cost: each expert computes all tokens, not only its own. Ties between routing weights
# resolve to the lower expert index (torch.topk's order for exact ties is not specified).

_DENSE_MOE = {"MixtralSparseMoeBlock", "OlmoeSparseMoeBlock", "Qwen2MoeSparseMoeBlock"}


def is_dense_moe(module):
    return type(module).__name__ in _DENSE_MOE and type(module).__module__.startswith("transformers.")


def _gated_mlp(cx, mlp, x, rows, tag):
    """An expert: Mixtral's w2(act(w1 x) * w3 x) or the MLP down(act(gate x) * up x); act must be SiLU."""
    names = ("w1", "w3", "w2") if hasattr(mlp, "w1") else ("gate_proj", "up_proj", "down_proj")
    gate, up, down = (getattr(mlp, n) for n in names)
    if not isinstance(getattr(mlp, "act_fn", None), nn.SiLU) or any(lin.bias is not None for lin in (gate, up, down)):
        return None
    dtype = cx.torch_dtype(x)
    inner = Meta([rows, gate.out_features], dtype)
    g = cx.emit("linear", [x, cx.tensor(gate.weight)], {}, inner, suffix=f"{tag}.gate")
    u = cx.emit("linear", [x, cx.tensor(up.weight)], {}, inner, suffix=f"{tag}.up")
    h = cx.emit("mul", [cx.emit("silu", [g], {}, inner, suffix=f"{tag}.act"), u], {}, inner, suffix=f"{tag}.gated")
    return cx.emit("linear", [h, cx.tensor(down.weight)], {}, Meta([rows, down.out_features], dtype),
                   suffix=f"{tag}.down")


def _dense_moe(cx, m, args, kwargs, value):
    x = args[0]
    if not _is_tensor(x) or cx.rank(x) != 3 or (m.training and getattr(m, "jitter_noise", 0)):
        return None
    out_value, logits_value = value
    b, s, h = cx.shape(x)
    rows, experts, dtype = b * s, m.num_experts, cx.torch_dtype(x)
    if m.gate.bias is not None or dtype != torch.float32:
        return None
    flat = cx.emit("reshape", [x], {"shape": [rows, h]}, Meta([rows, h], dtype), suffix="tokens")
    logits = cx.emit("linear", [flat, cx.tensor(m.gate.weight)], {}, logits_value, suffix="router_logits")
    table = Meta([rows, experts], dtype)
    probs = cx.emit("softmax", [logits], {"dim": 1}, table, suffix="routing")
    every = cx.constant(torch.arange(experts))
    masked = probs
    for k in range(m.top_k):
        best = cx.emit("argmax", [masked], {"dim": 1}, Meta([rows], torch.int64), suffix=f"top{k}")
        column = cx.emit("unsqueeze", [best], {"dim": 1}, Meta([rows, 1], torch.int64), suffix=f"top{k}.column")
        hot = cx.emit("eq", [column, every], {}, Meta([rows, experts], torch.bool), suffix=f"top{k}.hot")
        masked = cx.emit("masked_fill", [masked, hot], {"value": float("-inf")}, table, suffix=f"top{k}.taken")
    taken = cx.emit("eq", [masked, cx.constant(torch.tensor(float("-inf")))], {}, Meta([rows, experts], torch.bool),
                    suffix="selected")
    gates = cx.emit("where", [taken, probs, cx.constant(torch.tensor(0.0))], {}, table, suffix="gates")
    if getattr(m, "norm_topk_prob", True):  # Mixtral always renormalizes the top-k weights
        total = cx.emit("sum", [gates], {"dims": [1], "keepdim": True}, Meta([rows, 1], dtype), suffix="gates.sum")
        gates = cx.emit("div", [gates, total], {}, table, suffix="gates.normalized")
    out = None
    for e, expert in enumerate(m.experts):
        y = _gated_mlp(cx, expert, flat, rows, f"experts.{e}")
        if y is None:
            return None
        weight = cx.emit("slice", [gates], {"dim": 1, "start": e, "end": e + 1}, Meta([rows, 1], dtype),
                         suffix=f"experts.{e}.gate")
        term = cx.emit("mul", [y, weight], {}, Meta([rows, h], dtype), suffix=f"experts.{e}.weighted")
        if out is not None:
            term = cx.emit("add", [out, term], {}, Meta([rows, h], dtype), suffix=f"experts.{e}.sum")
        out = term
    if hasattr(m, "shared_expert"):  # Qwen2-MoE: an always-on expert, gated by a sigmoid
        shared = _gated_mlp(cx, m.shared_expert, flat, rows, "shared_expert")
        if shared is None or m.shared_expert_gate.bias is not None:
            return None
        score = cx.emit("linear", [flat, cx.tensor(m.shared_expert_gate.weight)], {}, Meta([rows, 1], dtype),
                        suffix="shared_expert_gate")
        score = cx.emit("sigmoid", [score], {}, Meta([rows, 1], dtype), suffix="shared_expert_gate.sigmoid")
        shared = cx.emit("mul", [score, shared], {}, Meta([rows, h], dtype), suffix="shared_expert.weighted")
        out = cx.emit("add", [out, shared], {}, Meta([rows, h], dtype), suffix="shared_expert.sum")
    return cx.emit("reshape", [out], {"shape": [b, s, h]}, out_value), logits


def module_handler(module):
    if is_dense_moe(module):
        return _dense_moe
    for type_, handler in MODULES:
        if isinstance(module, type_):
            return handler
    return None
