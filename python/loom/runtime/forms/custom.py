"""custom (src/ops/custom_ops.cc): an op registered with loom.register_op runs the user's function itself,
imported by its "module:qualname" attribute."""

from .common import as_tuple


def form(attrs):
    """The callable of a custom op whose attributes name its function ("callable")."""
    from ...custom_ops import import_callable

    fn = import_callable(attrs["callable"])
    return lambda *xs: as_tuple(fn(*xs))
