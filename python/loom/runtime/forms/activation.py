"""activation (src/ops/activation.cc): gelu, relu, silu, swiglu, geglu, softmax, log_softmax, and dropout,
whose mask is placed: element i is dropped by a hash of (seed attribute, step, global flat index of i), as the
reference kernel (src/verify/kernels_*.cc) draws it, so every plan drops the same elements."""

import math

import torch
import torch.nn.functional as F

from ..initial import mix_int
from .common import offset


def _gelu(attrs, inputs, outputs):
    approximate = attrs.get("approximate", "none")
    return lambda x: (F.gelu(x, approximate=approximate),)


def _unary_builder(fn):
    return lambda attrs, inputs, outputs: (lambda x: (fn(x),))


def _swiglu(attrs, inputs, outputs):
    return lambda gate, up: (F.silu(gate) * up,)


def _geglu(attrs, inputs, outputs):
    return lambda gate, up: (F.gelu(gate) * up,)


def _dropout(attrs, inputs, outputs):
    p = float(attrs.get("p", 0.1))
    return lambda x: (F.dropout(x, p=p, training=True),)


def _softmax_builder(fn):
    return lambda attrs, inputs, outputs: (lambda x: (fn(x, int(attrs.get("dim", -1))),))


# --- dropout's placed mask ----------------------------------------------------------------------------


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
    shape, start, step, full = spec["shape"], offset(spec), spec.get("step"), spec["full"]
    step = step or [1] * len(shape)
    flat = torch.zeros(shape, dtype=torch.int64)
    stride = 1
    for d in reversed(range(len(shape))):
        view = [1] * len(shape)
        view[d] = shape[d]
        flat = flat + (start[d] + torch.arange(shape[d], dtype=torch.int64) * step[d]).reshape(view) * stride
        stride *= full[d]
    return flat


# mix(global index) of a piece's elements: the half of the mask's hash no step changes, kept per piece (its
# whole shape, offset and step) so that a step hashes once. Bounded: the pieces a program's dropouts place.
_MIXED_INDEX = {}
_MIXED_INDEX_LIMIT = 256


def _mixed_global_index(spec):
    start, step = offset(spec), spec.get("step") or [1] * len(spec["shape"])
    key = (tuple(spec["shape"]), tuple(start), tuple(step), tuple(spec["full"]))
    mixed = _MIXED_INDEX.get(key)
    if mixed is None:
        if len(_MIXED_INDEX) >= _MIXED_INDEX_LIMIT:
            _MIXED_INDEX.clear()
        mixed = _MIXED_INDEX[key] = _mix_tensor(_global_flat_index_tensor(spec))
    return mixed


def dropout_mask(attrs, spec):
    """Which elements of the output piece `spec` dropout zeroes: element i where the top 53 bits of
    mix(key ^ mix(global index of i)), as a fraction of 2^53 (the generator's uniform), fall below p; compared
    as integers (bits < p 2^53 exactly when bits < ceil(p 2^53)). Step 1 keys the mask by the seed attribute
    (as `loom verify`'s interpreter); step k > 1 mixes k in, so every step draws a new mask, the same on every
    plan (the step count is the runtime's: compute.py). mix(global index) is the same every step: hashed once
    per piece (_mixed_global_index)."""
    p = float(attrs.get("p", 0.1))
    seed = int(attrs.get("seed", 0))
    step = int(attrs.get("step", 1))
    key = mix_int(seed) if step <= 1 else mix_int(mix_int(seed) ^ mix_int(step))
    z = _mix_tensor(_mixed_global_index(spec) ^ _as_signed(key))
    return _shift_right(z, 11) < math.ceil(p * 2.0 ** 53)


def dropout_multiplier(attrs, spec, dtype=torch.float64):
    """The mask as the factor dropout multiplies by: 0 where dropped, else 1 / (1 - p) (computed in float64,
    then rounded to dtype)."""
    p = float(attrs.get("p", 0.1))
    dropped = dropout_mask(attrs, spec)
    kept = torch.tensor(1.0 / (1.0 - p) if p < 1 else 0.0, dtype=torch.float64).to(dtype)
    return torch.where(dropped, torch.zeros((), dtype=dtype), kept)


def _placed_dropout(attrs, inputs, outputs):
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


# --- backward -----------------------------------------------------------------------------------------


def _dropout_backward(ctx):
    """The output is the input times a fixed mask (by global position, the placed form): the gradient is the
    forward form applied to the output gradient."""
    return lambda inputs, outputs, grads: (ctx.forward(grads[0])[0],)


def _gelu_backward(ctx):
    if not ctx.saved_inputs:
        return None
    approximate = ctx.attrs.get("approximate", "none")
    return lambda inputs, outputs, grads: (
        torch.ops.aten.gelu_backward(grads[0], inputs[0], approximate=approximate),)


def _softmax_backward(ctx):
    dim = int(ctx.attrs.get("dim", -1))
    backward = torch.ops.aten._softmax_backward_data if ctx.type == "softmax" else \
        torch.ops.aten._log_softmax_backward_data
    forward = torch.softmax if ctx.type == "softmax" else torch.log_softmax

    def run(inputs, outputs, grads):
        y = outputs[0] if ctx.saved_outputs else forward(inputs[0], dim)
        return (backward(grads[0], y, dim, y.dtype),)

    return run if (ctx.saved_outputs or ctx.saved_inputs) else None


FORWARD = {"gelu": _gelu, "relu": _unary_builder(F.relu), "silu": _unary_builder(F.silu), "swiglu": _swiglu,
           "geglu": _geglu, "dropout": _dropout, "softmax": _softmax_builder(torch.softmax),
           "log_softmax": _softmax_builder(torch.log_softmax)}
PLACED = {"dropout": _placed_dropout}
BACKWARD = {"dropout": _dropout_backward, "gelu": _gelu_backward, "softmax": _softmax_backward,
            "log_softmax": _softmax_backward}
# From the output y and its gradient g alone, through torch's fused backward kernels.
FROM_OUTPUT = {
    "relu": lambda attrs, y, g: torch.ops.aten.threshold_backward(g, y, 0),
    "softmax": lambda attrs, y, g: torch.ops.aten._softmax_backward_data(g, y, int(attrs.get("dim", -1)), y.dtype),
    "log_softmax": lambda attrs, y, g: torch.ops.aten._log_softmax_backward_data(g, y, int(attrs.get("dim", -1)),
                                                                                  y.dtype),
}
