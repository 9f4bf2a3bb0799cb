"""elementwise (src/ops/elementwise.cc): arithmetic, unary maths, scale, pow, remainder, clamp, where, masked_fill, cast;
the backward of add, sub, mul, scale, pow and tanh, and of the unary ops that save only their output."""

import math

import torch

from .common import in_grad_order, sum_to, two_operand_rule

_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
_UNARY = {
    "abs": torch.abs, "exp": torch.exp, "log": torch.log, "neg": torch.neg, "rsqrt": torch.rsqrt,
    "sigmoid": torch.sigmoid, "sqrt": torch.sqrt, "square": torch.square, "tanh": torch.tanh,
    "reciprocal": torch.reciprocal, "acos": torch.acos,
}


def _binary_builder(fn):
    return lambda attrs, inputs, outputs: (lambda a, b: (fn(a, b),))


def _unary_builder(fn):
    return lambda attrs, inputs, outputs: (lambda x: (fn(x),))


def _scale(attrs, inputs, outputs):
    factor = float(attrs["factor"])
    if factor.is_integer() and not inputs[0][1].is_floating_point:  # integer ids times 7 stay integers
        whole = int(factor)
        return lambda x: (x * whole,)
    return lambda x: (x * factor,)


def _pow(attrs, inputs, outputs):
    exponent = float(attrs["exponent"])
    return lambda x: (torch.pow(x, exponent),)


def _remainder(attrs, inputs, outputs):
    divisor = float(attrs["divisor"])
    # an integer x keeps its dtype: an integral divisor is passed as an int (torch would promote to float)
    return lambda x: (torch.remainder(x, int(divisor) if divisor.is_integer() and not x.is_floating_point() else divisor),)


def _clamp(attrs, inputs, outputs):
    # a bound may come as text ("inf", "-inf": JSON has no infinities); an infinite bound is no bound
    low, high = (None if b is None or math.isinf(float(b)) else float(b) for b in (attrs.get("min"), attrs.get("max")))
    if not inputs[0][1].is_floating_point:  # integer positions clamped (a span's start) stay integers
        low = None if low is None else int(math.ceil(low))
        high = None if high is None else int(math.floor(high))
    return lambda x: (torch.clamp(x, low, high),)


def _masked_fill(attrs, inputs, outputs):
    value = float(attrs["value"])
    return lambda x, mask: (x.masked_fill(mask, value),)


def _where(attrs, inputs, outputs):
    return lambda cond, a, b: (torch.where(cond, a, b),)


def _cast(attrs, inputs, outputs):
    dtype = outputs[0][1]
    return lambda x: (x.to(dtype),)


def _add_backward(ctx):
    sign = -1.0 if ctx.type == "sub" else 1.0

    def run(inputs, outputs, grads):
        g = grads[0]
        out = {}
        if 0 in ctx.grad_inputs:
            out[0] = sum_to(g, ctx.in_shape(0))
        if 1 in ctx.grad_inputs:
            out[1] = sum_to(g if sign > 0 else -g, ctx.in_shape(1))
        return in_grad_order(ctx, out)

    return run


def _mul_backward(ctx):
    if not ctx.saved_inputs:
        return None

    return two_operand_rule(ctx, lambda a, b, g: sum_to(g * b, ctx.in_shape(0)),
                            lambda a, b, g: sum_to(g * a, ctx.in_shape(1)))


def _scale_backward(ctx):
    factor = float(ctx.attrs["factor"])
    return lambda inputs, outputs, grads: (grads[0] * factor,)


def _pow_backward(ctx):
    if not ctx.saved_inputs:
        return None
    exponent = float(ctx.attrs["exponent"])
    if exponent == 0.0:
        return lambda inputs, outputs, grads: (torch.zeros_like(grads[0]),)
    # autograd's pow_backward: grad * (exponent * self.pow(exponent - 1))
    return lambda inputs, outputs, grads: (grads[0] * (exponent * inputs[0].pow(exponent - 1.0)),)


def _tanh_backward(ctx):
    if ctx.saved_outputs:
        return lambda inputs, outputs, grads: (torch.ops.aten.tanh_backward(grads[0], outputs[0]),)
    if ctx.saved_inputs:
        return lambda inputs, outputs, grads: (torch.ops.aten.tanh_backward(grads[0], torch.tanh(inputs[0])),)
    return None


FORWARD = {
    **{name: _binary_builder(fn) for name, fn in _BINARY.items()},
    **{name: _unary_builder(fn) for name, fn in _UNARY.items()},
    "scale": _scale, "pow": _pow, "remainder": _remainder, "clamp": _clamp, "masked_fill": _masked_fill, "where": _where, "cast": _cast,
}
POSITIVE_INPUTS = {"log", "sqrt", "rsqrt", "pow"}
BACKWARD = {"add": _add_backward, "sub": _add_backward, "mul": _mul_backward, "scale": _scale_backward,
            "pow": _pow_backward, "tanh": _tanh_backward}
# From the output y and its gradient g alone, through torch's fused backward kernels where autograd has one
# (one pass instead of three or four: GPT-2's tanh backward was 1.4 ms a call on [4, 128, 1024] spelled out).
FROM_OUTPUT = {
    "exp": lambda attrs, y, g: g * y,
    "sqrt": lambda attrs, y, g: g / (2 * y),
    "rsqrt": lambda attrs, y, g: -0.5 * g * y ** 3,
    "reciprocal": lambda attrs, y, g: -g * y * y,  # autograd's reciprocal backward: -grad * (y * y).conj()
    "tanh": lambda attrs, y, g: torch.ops.aten.tanh_backward(g, y),
    "sigmoid": lambda attrs, y, g: torch.ops.aten.sigmoid_backward(g, y),
}
