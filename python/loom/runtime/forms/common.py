"""What the op-form families share: the Unsupported error, small attribute and piece helpers, and the context
a closed-form backward rule is built from (BackwardContext)."""

from ..initial import DTYPES


class Unsupported(Exception):
    """There is no torch form for this op instance; the message says why."""


def as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def pair(attrs, name, default):
    value = attrs.get(name, default)
    if isinstance(value, int):
        return (value, value)
    return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])


def dim_list(attrs, name):
    value = attrs.get(name)
    return None if value is None else list(value)


def offset(spec):
    """Where a piece starts in its whole tensor (a piece spec's "offset"; zeros when it has none)."""
    return list(spec.get("offset", [0] * len(spec["shape"])))


def sum_to(g, shape):
    """g summed over the dimensions broadcasting added or stretched (autograd's sum_to_size)."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    return g.sum_to_size(shape) if len(shape) else g.sum()


def in_grad_order(ctx, by_input):
    """A backward rule's result in ctx.grad_inputs order from {input index: gradient}."""
    return tuple(by_input.get(i) for i in ctx.grad_inputs)


def two_operand_rule(ctx, grad_a, grad_b):
    """The backward rule of an op of two saved operands a, b and one output gradient g: grad_a(a, b, g) and
    grad_b(a, b, g) give each operand's gradient, computed only for the inputs that want one."""

    def run(inputs, outputs, grads):
        a, b, g = inputs[0], inputs[1], grads[0]
        out = {}
        if 0 in ctx.grad_inputs:
            out[0] = grad_a(a, b, g)
        if 1 in ctx.grad_inputs:
            out[1] = grad_b(a, b, g)
        return in_grad_order(ctx, out)

    return run


def attr_value(value):
    """An attribute as the request wrote it; non-finite floats come as the strings "nan", "inf", "-inf"."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return value


class BackwardContext:
    """What a rule may depend on: the forward part's attributes, its input and output piece specs (local
    `shape`, `offset`, the whole tensor's `full`), which inputs want gradients, and the forward form
    (built on first use: a rule may call it, as dropout's does on the output gradient)."""

    def __init__(self, forward, build_forward):
        self.type = forward["type"]
        self.attrs = forward["attrs"]
        self.inputs = forward["inputs"]
        self.outputs = forward["outputs"]
        self.grad_inputs = list(forward["grad_inputs"])
        self.grad_outputs = list(forward["grad_outputs"])
        self.saved_inputs = bool(forward["saved_inputs"])
        self.saved_outputs = bool(forward["saved_outputs"])
        self._build_forward = build_forward
        self._forward = None

    @property
    def forward(self):
        if self._forward is None:
            self._forward = self._build_forward()
        return self._forward

    def in_shape(self, i):
        return tuple(self.inputs[i]["shape"])

    def in_dtype(self, i):
        return DTYPES[self.inputs[i]["dtype"]]
