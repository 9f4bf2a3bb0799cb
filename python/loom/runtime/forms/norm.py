"""norm (src/ops/norm.cc, batch_norm_parts.cc): layer, RMS, batch and group norm, training batch norm in
batch-splittable parts; the backward of layer and RMS norm."""

import torch
import torch.nn.functional as F

from .common import in_grad_order, sum_to


def _layer_norm(attrs, inputs, outputs):
    eps = float(attrs.get("eps", 1e-5))
    hidden = [inputs[0][0][-1]]
    return lambda x, w, b=None: (F.layer_norm(x, hidden, w, b, eps),)


def _rms_norm(attrs, inputs, outputs):
    eps = float(attrs.get("eps", 1e-5))
    hidden = [inputs[0][0][-1]]
    if hasattr(F, "rms_norm"):
        return lambda x, w: (F.rms_norm(x, hidden, w, eps),)
    return lambda x, w: (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w,)


def _batch_norm(attrs, inputs, outputs):
    eps = float(attrs.get("eps", 1e-5))
    momentum = float(attrs.get("momentum", 0.1))
    return lambda x, w=None, b=None: (F.batch_norm(x, None, None, w, b, True, momentum, eps),)


def _group_norm(attrs, inputs, outputs):
    eps = float(attrs.get("eps", 1e-5))
    groups = int(attrs["groups"])
    return lambda x, w=None, b=None: (F.group_norm(x, groups, w, b, eps),)


# Training batch norm in batch-splittable parts (src/ops/batch_norm_parts.cc): per-channel sums over
# the batch and space of this shard (the plan adds the shards' parts), then the normalization. The
# statistics are float32; the count and the centering mean take no gradient (the engine's rule).
def _channel_view(x):
    return [1, -1] + [1] * (x.dim() - 2)


def _batch_dims(x):
    return [0] + list(range(2, x.dim()))


def _at_least_f32(x):
    """Statistics in float32, or in float64 for a float64 graph (float32 there would round its batch norm)."""
    return x if x.dtype == torch.float64 else x.float()


def _batch_norm_sums(attrs, inputs, outputs):
    def run(x):
        per_channel = x.numel() // x.shape[1] if x.shape[1] else 0
        return _at_least_f32(x).sum(_batch_dims(x)), torch.full((x.shape[1],), float(per_channel), device=x.device)

    return run


def _batch_norm_centered_sums(attrs, inputs, outputs):
    def run(x, total, count):
        mean = (total / count).detach().view(_channel_view(x))
        return (_at_least_f32(x) - mean).square().sum(_batch_dims(x)),

    return run


def _batch_norm_from_sums(attrs, inputs, outputs):
    eps = float(attrs.get("eps", 1e-5))

    def run(x, total, squares, count, w, b):
        count = count.detach()
        shape = _channel_view(x)
        mean, inv_std = (total / count).view(shape), torch.rsqrt(squares / count + eps).view(shape)
        return ((_at_least_f32(x) - mean) * inv_std * _at_least_f32(w).view(shape)
                + _at_least_f32(b).view(shape)).to(x.dtype),

    return run


def _layer_norm_backward(ctx):
    if not ctx.saved_inputs:
        return None
    eps = float(ctx.attrs.get("eps", 1e-5))
    hidden = [ctx.in_shape(0)[-1]]
    n_in = len(ctx.inputs)
    mask = [i in ctx.grad_inputs for i in range(3)]

    def run(inputs, outputs, grads):
        x = inputs[0]
        w = inputs[1] if n_in > 1 else None
        b = inputs[2] if n_in > 2 else None
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, hidden, w, b, eps)
        gx, gw, gb = torch.ops.aten.native_layer_norm_backward(grads[0], x, hidden, mean, rstd, w, b,
                                                                [mask[0], mask[1] and w is not None,
                                                                 mask[2] and b is not None])
        return in_grad_order(ctx, {0: gx, 1: gw, 2: gb})

    return run


def _rms_norm_backward(ctx):
    if not ctx.saved_inputs:
        return None
    eps = float(ctx.attrs.get("eps", 1e-5))

    def run(inputs, outputs, grads):
        x, w = inputs[0], inputs[1]
        g = grads[0]
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        normed = x * rstd
        out = {}
        if 0 in ctx.grad_inputs:
            gn = g * w
            out[0] = rstd * (gn - normed * (gn * normed).mean(-1, keepdim=True))
        if 1 in ctx.grad_inputs:
            out[1] = sum_to(g * normed, ctx.in_shape(1))
        return in_grad_order(ctx, out)

    return run


FORWARD = {"layer_norm": _layer_norm, "rms_norm": _rms_norm, "batch_norm": _batch_norm, "group_norm": _group_norm,
           "batch_norm_sums": _batch_norm_sums, "batch_norm_centered_sums": _batch_norm_centered_sums,
           "batch_norm_from_sums": _batch_norm_from_sums}
POSITIVE_INPUTS = {"batch_norm_centered_sums", "batch_norm_from_sums"}
BACKWARD = {"layer_norm": _layer_norm_backward, "rms_norm": _rms_norm_backward}
