"""Handlers of arithmetic, linear algebra, normalization, attention and losses (images: vision.py)."""

import math

import torch

from .base import Meta, T, _arg, _is_tensor, _scalar_operand
from .counted_tokens import counted_tokens


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
        if not _is_tensor(b) and isinstance(b, (int, float)) and type_ in ("mul", "div") \
                and isinstance(value, torch.Tensor) and cx.torch_dtype(a) != value.dtype:
            # an integer tensor times a float promotes (BigBird's mask * 1e6): the scale reads the promoted tensor
            a = cx.emit("cast", [a], {"dtype": cx.dtype_name(value.dtype)}, Meta(cx.shape(a), value.dtype),
                        suffix="promoted")
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
    a, b = cx.tensor(args[0]), cx.tensor(args[1])
    ranks = (cx.rank(a), cx.rank(b))
    if min(ranks) == 2 and max(ranks) > 2:
        # A matrix times a batch of matrices (Mamba's projection weight [m k] @ x [b k n]): the registry's matmul
        # batches equal ranks only, so an einsum with the batch dims named.
        batch = "".join(chr(ord("p") + k) for k in range(max(ranks) - 2))
        left, right = ("mk" if ranks[0] == 2 else batch + "mk"), ("kn" if ranks[1] == 2 else batch + "kn")
        return cx.emit("einsum", [a, b], {"equation": f"{left},{right}->{batch}mn"}, value)
    if ranks[0] == ranks[1] > 2 and cx.shape(a)[:-2] != cx.shape(b)[:-2]:
        # batch dims that broadcast (DeepSeek V3.2's indexer: [b s h d] @ [b 1 d t]): the registry's matmul takes
        # equal batch dims, so the operand with unit dims is expanded first
        batch = list(torch.broadcast_shapes(tuple(cx.shape(a)[:-2]), tuple(cx.shape(b)[:-2])))
        a, b = (x if cx.shape(x)[:-2] == batch else
                cx.emit("expand", [x], {"shape": batch + cx.shape(x)[-2:]}, Meta(batch + cx.shape(x)[-2:],
                                                                                  cx.torch_dtype(x)), suffix="batched")
                for x in (a, b))
    return cx.emit("matmul", [a, b], {}, value)


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
    if len(shape) != 1:
        return None
    if weight is None:  # elementwise_affine=False (DiffLlama's group norm): a constant unit scale
        weight = torch.ones(int(shape[0]), dtype=cx.torch_dtype(x))
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
        if isinstance(mask, T) and not causal and cx.torch_dtype(mask).is_floating_point \
                and cx.shape(q)[-3] == cx.shape(k)[-3]:
            return _attention_with_bias(cx, q, k, v, mask, attrs, value)
        if isinstance(mask, T):
            return None  # a computed boolean mask: the engine takes an additive constant bias (or causal)
        if mask.dtype == torch.bool:  # a constant one: the additive bias that keeps the same keys
            dtype = cx.torch_dtype(q)
            mask = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)
        inputs.append(cx.tensor(mask))
    return cx.emit("scaled_dot_product_attention", inputs, attrs, value)


def _attention_with_bias(cx, q, k, v, bias, attrs, value):
    """softmax(q k^T * scale + bias) v spelled out, for an additive bias computed from parameters (T5's
    relative-position bias under transformers 5's SDPA attention): the registry op's bias is a constant."""
    rank, dtype = cx.rank(q), cx.torch_dtype(q)
    k_shape = cx.shape(k)
    scores = list(cx.shape(q)[:-1]) + [k_shape[-2]]
    kt = cx.emit("transpose", [k], {"dim0": rank - 2, "dim1": rank - 1},
                 Meta(list(k_shape[:-2]) + [k_shape[-1], k_shape[-2]], dtype), suffix="key_t")
    s = cx.emit("matmul", [q, kt], {}, Meta(scores, dtype), suffix="scores")
    if attrs["scale"] != 1.0:
        s = cx.emit("scale", [s], {"factor": attrs["scale"]}, Meta(scores, dtype), suffix="scaled")
    s = cx.emit("add", [s, bias], {}, Meta(scores, dtype), suffix="biased")
    p = cx.emit("softmax", [s], {"dim": rank - 1}, Meta(scores, dtype), suffix="probs")
    if attrs.get("dropout"):
        p = cx.emit("dropout", [p], {"p": attrs["dropout"]}, Meta(scores, dtype), suffix="dropout")
    return cx.emit("matmul", [p, v], {}, value)


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
    loss = cx.emit(type_, inputs, attrs, _f32_like(value), suffix=None if _is_f32(value) else "f32")
    return _as_loss_dtype(cx, loss, value)


def _token_mean(cx, type_, inputs, attrs, value):
    """torch's mean over the counted tokens (label != ignore_index): the engine's cross_entropy / nll_loss divide
    the counted tokens' sum by their third input, the whole batch's counted tokens (counted_tokens.py), or without
    it by the labels' element count. Constant labels: the factor numel / count folded into a scale."""
    logits, labels = inputs
    count = counted_tokens(cx, labels, attrs["ignore_index"])
    if isinstance(count, T):
        return _loss(cx, type_, [logits, cx.tensor(labels), count], attrs, value)
    if count is None or count == labels.numel():  # on meta (elements unknown), or nothing ignored
        return _loss(cx, type_, [logits, cx.tensor(labels)], attrs, value)
    whole = cx.emit(type_, [logits, cx.tensor(labels)], attrs, Meta((), torch.float32), suffix="over_numel")
    mean = cx.emit("scale", [whole], {"factor": labels.numel() / count if count else math.nan}, _f32_like(value),
                   suffix=None if _is_f32(value) else "f32")
    return _as_loss_dtype(cx, mean, value)


def _is_f32(value):
    return not isinstance(value, torch.Tensor) or value.dtype == torch.float32


def _f32_like(value):
    return value if _is_f32(value) else Meta(value.shape, torch.float32)


def _as_loss_dtype(cx, loss, value):
    """The f32 loss, or for a model of another dtype the loss cast to it."""
    return loss if _is_f32(value) else cx.emit("cast", [loss], {"dtype": cx.dtype_name(value.dtype)}, value)


def _cross_entropy(cx, args, kwargs, value):
    logits, labels = args[0], args[1]
    if kwargs.get("reduction", "mean") != "mean" or kwargs.get("weight") is not None:
        return None
    attrs = {"ignore_index": int(kwargs.get("ignore_index", -100))}  # torch's default, -100, spelled out
    if kwargs.get("label_smoothing", 0.0):
        attrs["label_smoothing"] = float(kwargs["label_smoothing"])
    return _token_mean(cx, "cross_entropy", [logits, labels], attrs, value)


def _nll_loss(cx, args, kwargs, value):
    log_probs, labels = args[0], _arg(args, kwargs, 1, "target")
    if kwargs.get("reduction", "mean") != "mean" or kwargs.get("weight") is not None \
            or any(kwargs.get(k) is not None for k in ("size_average", "reduce")):
        return None
    return _token_mean(cx, "nll_loss", [log_probs, labels], {"ignore_index": int(kwargs.get("ignore_index", -100))},
                       value)


def _gather(cx, args, kwargs, value):
    """torch.gather(x, dim, index) (ProphetNet's relative-position buckets; RoBERTa's token types read at traced
    positions): a one-hot mask of the index along a new last dim, where(mask, x, 0) summed over it; exact (the
    sum adds zeros). A constant index's mask is a constant; a traced one's is eq(index, arange)."""
    x, dim, index = args[0], _arg(args, kwargs, 1, "dim"), _arg(args, kwargs, 2, "index")
    if isinstance(x, torch.Tensor) and _is_tensor(index):
        x = cx.tensor(x)  # a constant table read at traced positions
    if not _is_tensor(x) or not isinstance(index, (torch.Tensor, T)) or kwargs.get("sparse_grad"):
        return None
    index_shape = list(index.shape) if isinstance(index, torch.Tensor) else list(cx.shape(index))
    shape, dtype = cx.shape(x), cx.torch_dtype(x)
    if len(index_shape) != len(shape):
        return None
    dim = dim + len(shape) if dim < 0 else dim
    size = shape[dim]
    if any(index_shape[d] != shape[d] for d in range(len(shape)) if d != dim):
        return None  # torch also reads a smaller index's box of x; not needed so far
    if isinstance(index, torch.Tensor):
        hot = cx.constant(index.unsqueeze(-1) == torch.arange(size))  # [index's shape.., size]: where each reads
    else:
        column = cx.emit("unsqueeze", [index], {"dim": len(index_shape)},
                         Meta(index_shape + [1], cx.torch_dtype(index)), suffix="column")
        hot = cx.emit("eq", [column, cx.constant(torch.arange(size))], {}, Meta(index_shape + [size], torch.bool),
                      suffix="hot")
    moved = _move_last(cx, x, dim)  # [.. without dim .., size]
    spread_shape = list(cx.shape(moved))
    spread_shape.insert(dim, 1)
    spread = cx.emit("unsqueeze", [moved], {"dim": dim}, Meta(spread_shape, dtype), suffix="spread")
    picked_shape = index_shape + [size]
    picked = cx.emit("where", [hot, spread, cx.constant(torch.tensor(0.0, dtype=dtype))], {},
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
    """a & b of tensors: where(a, b, a), false wherever a is; a non-boolean operand (LongT5's integer
    attention mask) is its elements' truth first, x != 0, as torch.logical_and reads it."""
    if not all(isinstance(v, (T, torch.Tensor)) for v in args[:2]):
        return None
    a, b = (_truth(cx, cx.tensor(v)) for v in args[:2])
    return cx.emit("where", [a, b, a], {}, value)


def _truth(cx, x):
    """x as a boolean tensor: itself, or x != 0."""
    dtype = cx.torch_dtype(x)
    if dtype == torch.bool:
        return x
    return cx.emit("ne", [x, cx.constant(torch.tensor(0, dtype=dtype))], {}, Meta(cx.shape(x), torch.bool),
                   suffix="truth")
