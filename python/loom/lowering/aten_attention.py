"""scaled_dot_product_attention with a mask the registry's fused attention does not take (capture="export"):
a computed boolean or additive mask, with is_causal, with grouped key-value heads (DeepSeek V3.2's and GLM's
indexer masks, AXK2), spelled out as softmax(q k^T * scale + bias) v."""

import math

import torch

from .aten_math import named
from .base import Meta, T
from .compute import _attention_with_bias


def _sdpa_general(cx, args, kwargs, value):
    """scaled_dot_product_attention with a mask the registry op does not take (it takes a constant additive
    bias or causality): a traced boolean mask (kept keys true) or a traced additive one, also with
    is_causal and with grouped key-value heads (enable_gqa, or fewer key heads than query heads), spelled as
    softmax(q k^T * scale + bias) v with the heads of k and v repeated for their query groups. Returns None
    when the plain lowering applies (aten.py's _sdpa_grouped handles it)."""
    a = named(cx.node.target, args, kwargs)
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    if not isinstance(mask, T) and not (isinstance(mask, torch.Tensor) and bool(a["is_causal"])):
        return None
    q_shape, k_shape = list(cx.shape(q)), list(cx.shape(k))
    if len(q_shape) < 3 or len(k_shape) != len(q_shape) or q_shape[-3] % k_shape[-3]:
        return None
    dtype, s, t = cx.torch_dtype(q), q_shape[-2], k_shape[-2]
    groups = q_shape[-3] // k_shape[-3]
    if groups > 1:
        k, v = _repeat_heads(cx, k, groups), _repeat_heads(cx, v, groups)
    mask_dtype = cx.torch_dtype(mask) if isinstance(mask, T) else mask.dtype
    mask_shape = list(cx.shape(mask)) if isinstance(mask, T) else list(mask.shape)
    lowest = torch.finfo(dtype).min
    if mask_dtype == torch.bool:
        mask = cx.emit("where", [cx.tensor(mask), cx.constant(torch.tensor(0.0, dtype=dtype)),
                                 cx.constant(torch.tensor(lowest, dtype=dtype))], {},
                       Meta(mask_shape, dtype), suffix="mask_bias")
    elif not mask_dtype.is_floating_point:
        return None
    elif mask_dtype != dtype:
        mask = cx.emit("cast", [cx.tensor(mask)], {"dtype": cx.dtype_name(dtype)}, Meta(mask_shape, dtype),
                       suffix="mask_cast")
    else:
        mask = cx.tensor(mask)
    if a["is_causal"]:  # torch's is_causal: top-left aligned, keys up to the query's own position
        keep = torch.ones(s, t, dtype=torch.bool).tril()
        causal = cx.constant(torch.zeros(s, t, dtype=dtype).masked_fill(~keep, lowest))
        joined = list(torch.broadcast_shapes(tuple(mask_shape), (s, t)))
        # lowest + lowest overflows to -inf in float32: a row with keys left stays finite after the softmax
        mask = cx.emit("add", [mask, causal], {}, Meta(joined, dtype), suffix="causal_bias")
        mask = cx.emit("clamp", [mask], {"min": float(lowest)}, Meta(joined, dtype), suffix="causal_clamped")
    scale = a["scale"]
    attrs = {"scale": float(scale) if scale is not None else 1.0 / math.sqrt(q_shape[-1])}
    if a["dropout_p"]:
        attrs["dropout"] = float(a["dropout_p"])
    return _attention_with_bias(cx, q, k, v, mask, attrs, value)


def _repeat_heads(cx, x, groups):
    """[..., h, t, d] -> [..., h * groups, t, d], each head repeated for its `groups` query heads in a row
    (torch's enable_gqa: repeat_interleave over the head dim)."""
    shape, dtype = list(cx.shape(x)), cx.torch_dtype(x)
    lead, heads = shape[:-3], shape[-3]
    wide = lead + [heads, 1] + shape[-2:]
    x = cx.emit("reshape", [x], {"shape": wide}, Meta(wide, dtype), suffix="heads")
    grown = lead + [heads, groups] + shape[-2:]
    x = cx.emit("expand", [x], {"shape": grown}, Meta(grown, dtype), suffix="heads_repeated")
    merged = lead + [heads * groups] + shape[-2:]
    return cx.emit("reshape", [x], {"shape": merged}, Meta(merged, dtype), suffix="heads_merged")
