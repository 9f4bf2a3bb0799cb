"""attention (src/ops/attention.cc): scaled dot-product attention, eager attention's causal mask and rotary
embeddings. Placed as the reference defines them: causal masks and rotary positions in global positions (a
shard at sequence offset a starts there), no dropout. The backward of plain attention runs the fused kernel's from what the forward kept."""

import weakref

import torch
import torch.nn.functional as F

from .common import Unsupported, in_grad_order, offset


def _attention(attrs, inputs, outputs):
    causal = bool(attrs.get("causal", False))
    scale = attrs.get("scale")
    dropout = float(attrs.get("dropout", 0.0))
    gqa = inputs[0][0][1] != inputs[1][0][1]
    if causal and len(inputs) == 4:
        raise Unsupported("causal attention with an additive bias has no single torch call")
    extra = {"enable_gqa": True} if gqa else {}

    def run(q, k, v, bias=None):
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout, is_causal=causal,
                                               scale=scale, **extra),)

    return run


def _rotary(attrs, inputs, outputs):
    (b, h, s, d), dtype = inputs[0]
    base = float(attrs.get("base", 10000.0))
    half = d // 2
    # HF LLaMA's rotate-half form; the tables are cached by a real implementation, so built here once.
    inv = base ** (-torch.arange(0, half, dtype=torch.float32) * 2.0 / d)
    angles = torch.arange(s, dtype=torch.float32)[:, None] * inv[None, :]
    tables = {}

    def run(x):
        key = (x.device, x.dtype)
        if key not in tables:
            tables[key] = (angles.cos().to(x.device, x.dtype), angles.sin().to(x.device, x.dtype))
        cos, sin = tables[key]
        x1, x2 = x[..., :half], x[..., half:]
        return (torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1),)

    return run


def _placed_rotary(attrs, inputs, outputs):
    spec = inputs[0]
    (_, _, s, d), start = spec["shape"], offset(spec)[2]
    base = float(attrs.get("base", 10000.0))
    half = d // 2
    inv = base ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / d)
    angles = (start + torch.arange(s, dtype=torch.float64))[:, None] * inv[None, :]

    def run(x):
        cos, sin = angles.cos().to(x.device, x.dtype), angles.sin().to(x.device, x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return (torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1),)

    return run


MASKED_SCORE = -10000.0  # Megatron-LM's attention_mask_func fill (src/ops/attention.cc, causal_mask)


def _masking(s, t, q_start=0, k_start=0):
    """scores [..., s, t] -> the keys after each query (global positions) set to MASKED_SCORE."""
    hidden = (k_start + torch.arange(t))[None, :] > (q_start + torch.arange(s))[:, None]

    def run(x):
        return (x.masked_fill(hidden.to(x.device), MASKED_SCORE),)

    return run


def _causal_mask(attrs, inputs, outputs):
    (*_, s, t), _ = inputs[0]
    return _masking(s, t)


def _placed_causal_mask(attrs, inputs, outputs):
    spec = inputs[0]
    *_, s, t = spec["shape"]
    *_, q_start, k_start = offset(spec)
    return _masking(s, t, q_start, k_start)


# The fused attention's backward needs the forward's output and row log-sum-exp; under autograd it reruns
# the forward to get them (a third of the attention's backward time on CPU). The plain forward on CPU keeps
# them here, keyed by its input tensors, for the backward rule to take: the same kernels autograd calls.
# The entry holds q, k, v weakly and goes when the program drops any of them: a forward whose backward reads
# other tensors (a recomputed forward's first run, evaluation) must not keep its inputs and output alive past
# the plan's `del` (the memory model, include/loom/cost/memory_model.h, counts them until then).
ATTENTION_SAVED = {}


def attention_keeping_logsumexp(q, k, v, causal, scale):
    # The CPU flash kernel takes one head size for q, k and v; values of another width (DeepSeek V3's
    # multi-head latent attention: 192-wide queries and keys, 128-wide values) take torch's math kernel,
    # whose backward the rule's autograd path runs.
    if q.device.type != "cpu" or q.dtype not in (torch.float32, torch.float64) or torch.is_grad_enabled() \
            or v.shape[-1] != q.shape[-1]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    out, logsumexp = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    key = (id(q), id(k), id(v))
    ATTENTION_SAVED[key] = (weakref.ref(q), weakref.ref(k), weakref.ref(v), out, logsumexp)
    for x in (q, k, v):
        weakref.finalize(x, ATTENTION_SAVED.pop, key, None)
    return out


def _placed_attention(attrs, inputs, outputs):
    """Attention as the reference defines it: dropout 0 (a random mask would change what the plan computes),
    causal masking in global positions (a query shard at sequence offset a sees keys up to a + i), and a
    fully masked row gives zeros. torch's fused call serves the plain cases; the rest is spelled out."""
    causal = bool(attrs.get("causal", False))
    scale = attrs.get("scale")
    q_start, k_start = offset(outputs[0])[2], offset(inputs[1])[2]
    with_bias = len(inputs) == 4
    gqa = inputs[0]["shape"][1] != inputs[1]["shape"][1]
    if not causal or (not with_bias and q_start == 0 and k_start == 0):
        if not with_bias and not gqa:
            return lambda q, k, v: (attention_keeping_logsumexp(q, k, v, causal, scale),)
        extra = {"enable_gqa": True} if gqa else {}
        return lambda q, k, v, bias=None: (
            F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal, scale=scale, **extra),)
    s, t = inputs[0]["shape"][2], inputs[1]["shape"][2]
    visible = (k_start + torch.arange(t))[None, :] <= (q_start + torch.arange(s))[:, None]

    def run(q, k, v, bias=None):
        if gqa:
            repeat = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)
        factor = scale if scale is not None else q.shape[-1] ** -0.5
        logits = torch.matmul(q, k.transpose(-1, -2)) * factor
        if bias is not None:
            logits = logits + bias
        mask = visible.to(q.device)
        logits = logits.masked_fill(~mask, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        probs = torch.where(mask.any(-1, keepdim=True), probs, torch.zeros_like(probs))
        return (torch.matmul(probs, v),)

    return run


def _attention_backward(ctx):
    """Plain attention (no bias, no grouped heads, causal only unsharded along the sequence: the forms
    attention_keeping_logsumexp serves): the fused kernel's backward from the output and log-sum-exp the
    forward kept, else (on a device without the CPU kernel, or a forward not kept) autograd over the fused
    forward, as the runtime's fallback does."""
    causal, scale = bool(ctx.attrs.get("causal", False)), ctx.attrs.get("scale")
    q_spec, k_spec = ctx.inputs[0], ctx.inputs[1]
    starts = [(spec.get("offset") or [0] * 4)[2] for spec in (q_spec, k_spec, ctx.outputs[0])]  # sequence
    if len(ctx.inputs) != 3 or not ctx.saved_inputs or q_spec["shape"][1] != k_spec["shape"][1] \
            or (causal and any(starts)):
        return None

    def run(inputs, outputs, grads):
        q, k, v = inputs
        kept = ATTENTION_SAVED.pop((id(q), id(k), id(v)), None)
        if kept is not None and kept[0]() is q and kept[1]() is k and kept[2]() is v:
            out, logsumexp = kept[3], kept[4]
            dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                grads[0].contiguous(), q, k, v, out, logsumexp, 0.0, causal, scale=scale)
        else:
            with torch.enable_grad():
                leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                out = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
                dq, dk, dv = torch.autograd.grad(out, leaves, grads[0])
        return in_grad_order(ctx, {0: dq, 1: dk, 2: dv})

    return run


FORWARD = {"scaled_dot_product_attention": _attention, "rotary_embedding": _rotary, "causal_mask": _causal_mask}
PLACED = {"scaled_dot_product_attention": _placed_attention, "rotary_embedding": _placed_rotary,
          "causal_mask": _placed_causal_mask}
BACKWARD = {"scaled_dot_product_attention": _attention_backward}
