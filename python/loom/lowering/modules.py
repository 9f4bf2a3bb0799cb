"""Handlers of torch.nn modules (call_module), looked up by type."""

import math

import torch.nn as nn

from .base import Meta, _arg
from .compute import (
    _cross_entropy, _dropout, _embedding, _gelu, _group_norm, _layer_norm, _linear, _mse_loss, _rms_norm, _softmax,
    _softplus,
)
from .vision import (
    _adaptive_avg_pool2d, _batch_norm, _conv2d, _hardswish, _module_conv1d, _pool2d,
)
from .shapes import _flatten, _pad


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
    tracks = m.training and m.track_running_stats
    running = (m.running_mean, m.running_var) if tracks else (None, None)
    counted = {"num_batches_tracked": m.num_batches_tracked} if tracks else {}
    return _batch_norm(cx, [args[0], *running, m.weight, m.bias, training, m.momentum, m.eps], counted, value)


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
