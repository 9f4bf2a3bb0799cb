"""reduce (src/ops/reduce.cc): sum, mean, max / amax, argmax. Placed: a mean over a shard of its reduced
dims is a value part, the shard's sum over the whole tensor's count."""

import numpy as np
import torch

from .common import dim_list


def _reduction(fn):
    def build(attrs, inputs, outputs):
        dims = dim_list(attrs, "dims")
        keep = bool(attrs.get("keepdim", False))
        if dims is None:
            dims = list(range(len(inputs[0][0])))
        return lambda x: (fn(x, dims, keep),)

    return build


def _argmax(attrs, inputs, outputs):
    dim = attrs.get("dim")
    keep = bool(attrs.get("keepdim", False))
    return lambda x: (torch.argmax(x, dim, keepdim=keep) if dim is not None else torch.argmax(x),)


def _placed_mean(attrs, inputs, outputs):
    """A mean over a shard of its reduced dims is a value part: the shard's sum over the whole tensor's count
    (as the reference kernel, kernels_reduce.cc), so the plan's all-reduce of the parts gives the mean."""
    x = inputs[0]
    rank = len(x["shape"])
    dims = dim_list(attrs, "dims")
    dims = list(range(rank)) if dims is None else [int(d) % rank for d in dims]
    if all(x["shape"][d] == x["full"][d] for d in dims):
        return None  # the whole reduced extent is here: the plain form
    count = float(np.prod([x["full"][d] for d in dims]))
    keep = bool(attrs.get("keepdim", False))
    return lambda t: (torch.sum(t, dims, keepdim=keep) / count,)


FORWARD = {"sum": _reduction(lambda x, d, k: torch.sum(x, d, keepdim=k)),
           "mean": _reduction(lambda x, d, k: torch.mean(x, d, keepdim=k)),
           "amax": _reduction(lambda x, d, k: torch.amax(x, d, keepdim=k)),
           "max": _reduction(lambda x, d, k: torch.amax(x, d, keepdim=k)),
           "argmax": _argmax}
NOT_DIFFERENTIABLE = {"argmax"}
PLACED = {"mean": _placed_mean}
