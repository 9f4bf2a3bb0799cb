"""autograd (src/ops/autograd_ops.cc): the ops the engine's autograd adds, gradient accumulation and the
loss's seed gradient (fill_like)."""

import torch


def _accumulate(attrs, inputs, outputs):
    def run(*xs):
        total = xs[0] + xs[1] if len(xs) > 1 else xs[0].clone()
        for x in xs[2:]:
            total = total + x
        return (total,)

    return run


def _fill_like(attrs, inputs, outputs):
    value = float(attrs.get("value", 1.0))
    return lambda x: (torch.full_like(x, value),)


FORWARD = {"accumulate": _accumulate, "fill_like": _fill_like}
NOT_DIFFERENTIABLE = {"fill_like"}
