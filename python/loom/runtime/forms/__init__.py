"""Registry op types as torch calls, one module per registry op family (src/ops/<family>.cc, `loom ops`):
the forms the runtime executes and `loom profile` times, indexed here in one table.

A family module holds, per op type of its family:

    FORWARD      builder(attrs, inputs, outputs) -> callable(*tensors) -> tuple of tensors; `inputs` and
                 `outputs` are lists of (local shape, torch dtype). Forms see local shapes only; whatever an
                 implementation would precompute once (rotary tables, Swin's relative-position index) is
                 built by the builder, outside the callable.
    PLACED       the same over the manifest's piece specs (local `shape`, `offset`, `step`, the whole tensor's
                 `full`), for ops whose result depends on where a shard sits in its whole tensor, as the
                 reference kernels (src/verify/kernels_*.cc) define them; a builder may return None (the
                 forward form serves the instance).
    BACKWARD     closed-form backward rules, builder(BackwardContext) -> rule(inputs, outputs, grads) -> one
                 gradient per ctx.grad_inputs entry (None: zero), or None when there is no closed form for the
                 instance (the runtime then runs autograd over the forward form). Each computes what torch's
                 autograd formula computes, with the same aten calls where torch has them, so results agree
                 to the last bit in most cases and to rounding otherwise (python/tests/test_backward_forms.py).
    FROM_OUTPUT  (attrs, y, g) -> input gradient, for a backward whose forward saved only its output.
    INDEX_INPUTS {input index: (other input index, its dimension)}: the integer input indexes that size.
    POSITIVE_INPUTS, NOT_DIFFERENTIABLE   op types whose floating inputs must be positive / that have no backward.
    UNSUPPORTED  op type -> why it has no torch form.
"""

from . import (activation, alphafold, attention, autograd, comparison, conv_pool, custom, elementwise, embedding,
               gather, linalg, loss, moe, norm, optimizer, padding, reduce, resample, routing, scan, shape, swin)
from ..initial import DTYPES
from .common import BackwardContext, Unsupported, as_tuple, attr_value

# The engine's family names (OpDef::family) -> the module holding the family's forms.
FAMILIES = {
    "linalg": linalg, "elementwise": elementwise, "activation": activation, "norm": norm, "embedding": embedding,
    "attention": attention, "conv_pool": conv_pool, "shape": shape, "reduce": reduce, "loss": loss, "moe": moe,
    "alphafold": alphafold, "swin": swin, "optimizer": optimizer, "autograd": autograd, "comparison": comparison,
    "scan": scan, "gather": gather, "padding": padding, "resample": resample, "routing": routing,
}


def _merged(table):
    """One family table of every family, merged; an op type in two families is a mistake in this package."""
    merged = {}
    for family, module in FAMILIES.items():
        for op_type, entry in getattr(module, table, {}).items():
            assert op_type not in merged, f"op type '{op_type}' has {table} in two families"
            merged[op_type] = entry
    return merged


def _union(table):
    return frozenset().union(*(getattr(module, table, ()) for module in FAMILIES.values()))


FORWARD = _merged("FORWARD")
PLACED = _merged("PLACED")
BACKWARD = _merged("BACKWARD")
FROM_OUTPUT = _merged("FROM_OUTPUT")
INDEX_INPUTS = _merged("INDEX_INPUTS")
UNSUPPORTED_REASONS = _merged("UNSUPPORTED")
POSITIVE_INPUTS = _union("POSITIVE_INPUTS")
NOT_DIFFERENTIABLE = _union("NOT_DIFFERENTIABLE")
# op type -> its family, for every type a family module names.
FAMILY = {op_type: family for family, module in FAMILIES.items()
          for op_type in (*getattr(module, "FORWARD", {}), *getattr(module, "UNSUPPORTED", {}))}


def build(op_type, attrs, inputs, outputs):
    """The forward callable for one instance over local (shape, dtype) pairs; raises Unsupported when there is
    none."""
    if op_type in UNSUPPORTED_REASONS:
        raise Unsupported(UNSUPPORTED_REASONS[op_type])
    if op_type.startswith("custom.") and "callable" in attrs:  # loom.register_op: the user's function itself
        return custom.form(attrs)
    builder = FORWARD.get(op_type)
    if builder is None:
        raise Unsupported(f"no torch form for op type '{op_type}'")
    return builder(attrs, inputs, outputs)


def build_placed(op_type, attrs, inputs, outputs):
    """The forward callable for one sub-op; `inputs` and `outputs` are the manifest's piece specs: the placed
    form where the family has one for the instance, else the forward form over the local shapes."""
    placed = PLACED.get(op_type)
    fn = placed(attrs, inputs, outputs) if placed else None
    if fn is not None:
        return fn
    return build(op_type, attrs, [_shape_dtype(s) for s in inputs], [_shape_dtype(s) for s in outputs])


def build_backward(forward, build_forward):
    """The closed-form rule for a backward part whose forward part is `forward` (the manifest's `backward_of`),
    or None when its family has none for this instance. build_forward() builds the forward part's form."""
    builder = BACKWARD.get(forward["type"])
    if builder is None:
        return None
    ctx = BackwardContext(forward, build_forward)
    if any(k >= len(ctx.outputs) for k in ctx.grad_outputs) or any(i >= len(ctx.inputs) for i in ctx.grad_inputs):
        return None
    if any(not spec["dtype"].startswith("f") and not spec["dtype"].startswith("bf")
           for i, spec in enumerate(ctx.inputs) if i in ctx.grad_inputs):
        return None  # an integer input's gradient: autograd's path reports it
    return builder(ctx)


def positive_inputs(op_type):
    return op_type in POSITIVE_INPUTS


def index_bounds(op_type, inputs):
    """{input index: exclusive upper bound} for integer inputs that index another input's dimension."""
    bounds = {}
    for index, (other, dim) in INDEX_INPUTS.get(op_type, {}).items():
        if index < len(inputs) and other < len(inputs):
            bounds[index] = inputs[other][0][dim]
    return bounds


def _shape_dtype(spec):
    return tuple(spec["shape"]), DTYPES[spec["dtype"]]


__all__ = ["FAMILIES", "FAMILY", "FORWARD", "PLACED", "BACKWARD", "FROM_OUTPUT", "INDEX_INPUTS", "POSITIVE_INPUTS",
           "NOT_DIFFERENTIABLE", "UNSUPPORTED_REASONS", "Unsupported", "as_tuple", "attr_value", "build",
           "build_placed", "build_backward", "positive_inputs", "index_bounds"]
