"""custom (src/ops/custom_ops.cc): an op registered with loom.register_op runs the user's function itself,
imported by its "module:qualname" attribute."""

import torch

from .common import as_tuple


def form(attrs):
    """The callable of a custom op whose attributes name its function ("callable"). Its tensors come dense
    (the runtime's other forms take strided views, compute.py; a user's function may .view() its inputs)."""
    from ...custom_ops import import_callable

    fn = import_callable(attrs["callable"])
    return lambda *xs: as_tuple(fn(*(x.contiguous() if isinstance(x, torch.Tensor) else x for x in xs)))
