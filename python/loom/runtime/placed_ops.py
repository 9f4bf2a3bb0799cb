"""Op forms whose result depends on where a shard sits in its whole tensor, as the reference kernels
define them (src/verify/kernels_*.cc): a sub-op's spec gives each input and output piece's offset and the
whole tensor's shape. The plain forms (ops.py) see local shapes only, which is right everywhere else.

    dropout                   the mask of element i is a hash of (seed attribute, step, global flat index of i)
    embedding                 a vocabulary shard holds rows [offset, offset + rows): other ids give zeros
    target_logit, cross_entropy_parts
                              a class shard starts at its offset; smoothing divides by the whole vocabulary
    cross_entropy_from_parts, cross_entropy, nll_loss, mse_loss
                              a shard of the batch divides by the whole count (the shards' losses sum to the mean)
    rotary_embedding          positions start at the shard's sequence offset
    scaled_dot_product_attention
                              causal masks in global positions, with or without an additive bias; no dropout
    slice                     output element g of the whole reads input element start + g * step of the whole
    mean                      a shard of a reduced dim divides by the whole count (the shards' value parts add
                              up to the mean)
"""

import math

import numpy as np
import torch
import torch.nn.functional as F

from . import ops
from .initial import mix_int


def _offset(spec):
    return list(spec.get("offset", [0] * len(spec["shape"])))


def _as_signed(z):
    """A uint64 constant as the int64 with the same bits (torch's integer tensors are signed)."""
    z &= (1 << 64) - 1
    return z - (1 << 64) if z >= 1 << 63 else z


def _shift_right(z, bits):
    """The logical right shift of an int64 tensor holding uint64 bits."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _mix_tensor(z):
    """initial._mix_array over int64 tensors holding uint64 bits (adds and products wrap alike); z is not
    written, the passes after the first run in place on the result."""
    z = z + _as_signed(0x9E3779B97F4A7C15)
    z ^= _shift_right(z, 30)
    z *= _as_signed(0xBF58476D1CE4E5B9)
    z ^= _shift_right(z, 27)
    z *= _as_signed(0x94D049BB133111EB)
    z ^= _shift_right(z, 31)
    return z


def _global_flat_index_tensor(spec):
    """Each local element's flat index in the whole tensor (row-major), int64 (the whole tensor's indices fit)."""
    shape, offset, step, full = spec["shape"], _offset(spec), spec.get("step"), spec["full"]
    step = step or [1] * len(shape)
    flat = torch.zeros(shape, dtype=torch.int64)
    stride = 1
    for d in reversed(range(len(shape))):
        view = [1] * len(shape)
        view[d] = shape[d]
        flat = flat + (offset[d] + torch.arange(shape[d], dtype=torch.int64) * step[d]).reshape(view) * stride
        stride *= full[d]
    return flat


def dropout_mask(attrs, spec):
    """Which elements of the output piece `spec` dropout zeroes: element i where the top 53 bits of
    mix(key ^ mix(global index of i)), as a fraction of 2^53 (the generator's uniform), fall below p; compared
    as integers (bits < p 2^53 exactly when bits < ceil(p 2^53)). Step 1 keys the mask by the seed attribute
    (as `loom verify`'s interpreter); step k > 1 mixes k in, so every step draws a new mask, the same on every
    plan (the step count is the runtime's: compute.py)."""
    p = float(attrs.get("p", 0.1))
    seed = int(attrs.get("seed", 0))
    step = int(attrs.get("step", 1))
    key = mix_int(seed) if step <= 1 else mix_int(mix_int(seed) ^ mix_int(step))
    z = _global_flat_index_tensor(spec)
    z = _mix_tensor(_mix_tensor(z) ^ _as_signed(key))
    return _shift_right(z, 11) < math.ceil(p * 2.0 ** 53)


def dropout_multiplier(attrs, spec, dtype=torch.float64):
    """The mask as the factor dropout multiplies by: 0 where dropped, else 1 / (1 - p) (computed in float64,
    then rounded to dtype)."""
    p = float(attrs.get("p", 0.1))
    dropped = dropout_mask(attrs, spec)
    kept = torch.tensor(1.0 / (1.0 - p) if p < 1 else 0.0, dtype=torch.float64).to(dtype)
    return torch.where(dropped, torch.zeros((), dtype=dtype), kept)


def _dropout(attrs, inputs, outputs):
    """The input times its placed mask, hashed in torch once per form (the runtime builds one per step, shared
    by the forward and backward parts: compute.py) and made a factor once per dtype and device, not per call."""
    p = float(attrs.get("p", 0.1))
    dropped = dropout_mask(attrs, outputs[0])
    kept = 1.0 / (1.0 - p) if p < 1 else 0.0
    factors = {}

    def run(x):
        key = (x.dtype, x.device)
        if key not in factors:
            scale = torch.tensor(kept, dtype=torch.float64).to(x.dtype)
            factors[key] = torch.where(dropped, torch.zeros((), dtype=x.dtype), scale).to(x.device)
        return (x * factors[key],)

    return run


def _embedding(attrs, inputs, outputs):
    first = _offset(inputs[1])[0]
    rows = inputs[1]["shape"][0]

    def run(ids, weight):
        local = ids - first
        inside = (local >= 0) & (local < rows)
        looked_up = F.embedding(torch.where(inside, local, torch.zeros_like(local)), weight)
        return (looked_up * inside.unsqueeze(-1).to(looked_up.dtype),)

    return run


def _class_shard(attrs, logits_spec):
    first = _offset(logits_spec)[-1]
    vocabulary = logits_spec["full"][-1]
    ignore = int(attrs.get("ignore_index", -100))
    smoothing = float(attrs.get("label_smoothing", 0.0))

    def target(x, labels):
        width = x.shape[-1]
        local = labels - first
        hit = (labels != ignore) & (local >= 0) & (local < width)
        z = x.gather(-1, torch.where(hit, local, torch.zeros_like(local)).unsqueeze(-1)).squeeze(-1)
        z = torch.where(hit, z, torch.zeros_like(z)) * (1 - smoothing)
        if smoothing:
            z = z + (smoothing / vocabulary) * x.sum(-1)
        return torch.where(labels != ignore, z, torch.zeros_like(z))

    return target, ignore


def _target_logit(attrs, inputs, outputs):
    target, _ = _class_shard(attrs, inputs[0])
    return lambda logits, labels: (target(logits.float(), labels),)


def _cross_entropy_parts(attrs, inputs, outputs):
    target, ignore = _class_shard(attrs, inputs[0])

    def run(logits, labels, shift):
        x = logits.float()
        sums = torch.exp(x - shift.detach().float().unsqueeze(-1)).sum(-1)
        return (torch.where(labels != ignore, sums, torch.zeros_like(sums)), target(x, labels))

    return run


def _cross_entropy_from_parts(attrs, inputs, outputs):
    ignore = int(attrs.get("ignore_index", -100))
    labels_spec = inputs[3]
    token_shard = list(labels_spec["full"]) != list(labels_spec["shape"])
    whole_tokens = float(np.prod(labels_spec["full"])) if token_shard else None

    def run(sums, shift, target, labels):
        counted = labels != ignore
        safe = torch.where(counted, sums.float(), torch.ones_like(sums, dtype=torch.float32))
        per_token = torch.log(safe) + shift.detach().float() - target.float()
        total = torch.where(counted, per_token, torch.zeros_like(per_token)).sum()
        divisor = whole_tokens if token_shard else counted.sum().clamp(min=1).float()
        return ((total / divisor).float(),)

    return run


def _loss_divisor(spec, counted):
    """A shard of the batch divides by the whole tensor's element count, so the shards' losses add up to the
    whole's mean (exact when no token is ignored); the whole divides by its counted tokens."""
    if list(spec["full"]) != list(spec["shape"]):
        return float(np.prod(spec["full"]))
    return counted.sum().clamp(min=1).float()


def _classification_loss(log_probs_given):
    def build(attrs, inputs, outputs):
        ignore = int(attrs.get("ignore_index", -100))
        smoothing = float(attrs.get("label_smoothing", 0.0))

        def run(scores, labels):
            flat, flat_labels = scores.reshape(-1, scores.shape[-1]), labels.reshape(-1)
            if log_probs_given:
                total = F.nll_loss(flat, flat_labels, ignore_index=ignore, reduction="sum")
            else:
                total = F.cross_entropy(flat, flat_labels, ignore_index=ignore, label_smoothing=smoothing,
                                        reduction="sum")
            return ((total / _loss_divisor(inputs[1], labels != ignore)).float(),)

        return run

    return build


def _mse_loss(attrs, inputs, outputs):
    whole = float(np.prod(inputs[0]["full"])) if inputs[0]["full"] else 1.0
    return lambda pred, target: ((F.mse_loss(pred, target, reduction="sum") / whole).float(),)


def _rotary(attrs, inputs, outputs):
    spec = inputs[0]
    (_, _, s, d), start = spec["shape"], _offset(spec)[2]
    base = float(attrs.get("base", 10000.0))
    half = d // 2
    inv = base ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / d)
    angles = (start + torch.arange(s, dtype=torch.float64))[:, None] * inv[None, :]

    def run(x):
        cos, sin = angles.cos().to(x.device, x.dtype), angles.sin().to(x.device, x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return (torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1),)

    return run


# The fused attention's backward needs the forward's output and row log-sum-exp; under autograd it reruns
# the forward to get them (a third of the attention's backward time on CPU). The plain forward on CPU keeps
# them here, keyed by its input tensors, for backward_forms' rule to take: the same kernels autograd calls.
ATTENTION_SAVED = {}
_ATTENTION_SAVED_LIMIT = 512  # forwards whose backward never ran (recomputed forwards, evaluation)


def attention_keeping_logsumexp(q, k, v, causal, scale):
    if q.device.type != "cpu" or q.dtype not in (torch.float32, torch.float64) or torch.is_grad_enabled():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    out, logsumexp = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=scale)
    if len(ATTENTION_SAVED) >= _ATTENTION_SAVED_LIMIT:
        ATTENTION_SAVED.clear()
    ATTENTION_SAVED[(id(q), id(k), id(v))] = (q, k, v, out, logsumexp)
    return out


def _attention(attrs, inputs, outputs):
    """Attention as the reference defines it: dropout 0 (a random mask would change what the plan computes),
    causal masking in global positions (a query shard at sequence offset a sees keys up to a + i), and a
    fully masked row gives zeros. torch's fused call serves the plain cases; the rest is spelled out."""
    causal = bool(attrs.get("causal", False))
    scale = attrs.get("scale")
    q_start, k_start = _offset(outputs[0])[2], _offset(inputs[1])[2]
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


def _slice(attrs, inputs, outputs):
    """x[start:end:step] along dim, over shards: the attributes index the whole input (negative start as
    Python's, clamped as the reference kernel does); the pieces say where the local elements sit."""
    x, y = inputs[0], outputs[0]
    rank = len(x["shape"])
    dim = int(attrs["dim"]) % rank
    n = x["full"][dim]
    start = int(attrs.get("start", 0))
    start = min(max(start + n if start < 0 else start, 0), n)
    step = int(attrs.get("step", 1))
    x_step, y_step = (x.get("step") or [1] * rank)[dim], (y.get("step") or [1] * rank)[dim]
    first = start + _offset(y)[dim] * step - _offset(x)[dim]  # the first element read, from the input shard's start
    stride = step * y_step
    if first % x_step or stride % x_step:
        return None  # the input shard does not hold the elements as a strided range: the plain form's error
    first, stride = first // x_step, stride // x_step
    length = y["shape"][dim]
    index = [slice(None)] * rank
    index[dim] = slice(first, first + (length - 1) * stride + 1, stride)
    return lambda t: (t[tuple(index)].contiguous(),)


def _mean(attrs, inputs, outputs):
    """A mean over a shard of its reduced dims is a value part: the shard's sum over the whole tensor's count
    (as the reference kernel, kernels_reduce.cc), so the plan's all-reduce of the parts gives the mean."""
    x = inputs[0]
    rank = len(x["shape"])
    dims = ops.dim_list(attrs, "dims")
    dims = list(range(rank)) if dims is None else [int(d) % rank for d in dims]
    if all(x["shape"][d] == x["full"][d] for d in dims):
        return None  # the whole reduced extent is here: the plain form
    count = float(np.prod([x["full"][d] for d in dims]))
    keep = bool(attrs.get("keepdim", False))
    return lambda t: (torch.sum(t, dims, keepdim=keep) / count,)


PLACED = {
    "slice": _slice,
    "mean": _mean,
    "dropout": _dropout,
    "embedding": _embedding,
    "target_logit": _target_logit,
    "cross_entropy_parts": _cross_entropy_parts,
    "cross_entropy_from_parts": _cross_entropy_from_parts,
    "cross_entropy": _classification_loss(False),
    "nll_loss": _classification_loss(True),
    "mse_loss": _mse_loss,
    "rotary_embedding": _rotary,
    "scaled_dot_product_attention": _attention,
}


def build(op_type, attrs, inputs, outputs):
    """The callable for one sub-op; `inputs` and `outputs` are the manifest's piece specs."""
    placed = PLACED.get(op_type)
    fn = placed(attrs, inputs, outputs) if placed else None
    if fn is not None:
        return fn
    return ops.build(op_type, attrs, [_shape_dtype(s) for s in inputs], [_shape_dtype(s) for s in outputs])


def _shape_dtype(spec):
    from .initial import DTYPES
    return tuple(spec["shape"]), DTYPES[spec["dtype"]]
