"""linalg (src/ops/linalg.cc): linear, matmul, bmm, einsum; their backward from the saved inputs."""

import torch
import torch.nn.functional as F

from .common import in_grad_order, sum_to, two_operand_rule


def _linear(attrs, inputs, outputs):
    return lambda x, w, b=None: (F.linear(x, w, b),)


def _matmul(attrs, inputs, outputs):
    return lambda a, b: (torch.matmul(a, b),)


def _bmm(attrs, inputs, outputs):
    return lambda a, b: (torch.bmm(a, b),)


def _einsum(attrs, inputs, outputs):
    equation = attrs["equation"]
    return lambda *xs: (torch.einsum(equation, *xs),)


def _linear_backward(ctx):
    if not ctx.saved_inputs or len(ctx.in_shape(1)) != 2 or len(ctx.in_shape(0)) < 1:
        return None

    def run(inputs, outputs, grads):
        x, w = inputs[0], inputs[1]
        g = grads[0]
        out = {}
        if 0 in ctx.grad_inputs:
            out[0] = g.matmul(w)
        if 1 in ctx.grad_inputs:
            out[1] = g.reshape(-1, g.shape[-1]).t().mm(x.reshape(-1, x.shape[-1]))
        if 2 in ctx.grad_inputs:
            out[2] = g.reshape(-1, g.shape[-1]).sum(0)
        return in_grad_order(ctx, out)

    return run


def _matmul_backward(ctx):
    a_shape, b_shape = ctx.in_shape(0), ctx.in_shape(1)
    if not ctx.saved_inputs or len(a_shape) < 2 or len(b_shape) < 2:
        return None  # vector operands: autograd's unsqueeze bookkeeping is not worth spelling out

    return two_operand_rule(ctx, lambda a, b, g: sum_to(g.matmul(b.transpose(-1, -2)), a_shape),
                            lambda a, b, g: sum_to(a.transpose(-1, -2).matmul(g), b_shape))


def _bmm_backward(ctx):
    if not ctx.saved_inputs:
        return None

    return two_operand_rule(ctx, lambda a, b, g: g.bmm(b.transpose(1, 2)), lambda a, b, g: a.transpose(1, 2).bmm(g))


def _einsum_backward(ctx):
    """Two operands, no index repeated within a term, every index of an operand found in the output or the
    other operand (no summed-away broadcast): the gradient of one operand is the einsum of the output
    gradient with the other operand into the operand's subscripts."""
    equation = ctx.attrs["equation"].replace(" ", "")
    if not ctx.saved_inputs or "->" not in equation or "." in equation:
        return None
    lhs, result = equation.split("->")
    terms = lhs.split(",")
    if len(terms) != 2 or any(len(set(t)) != len(t) for t in (*terms, result)):
        return None
    a, b = terms
    if any(c not in result and c not in b for c in a) or any(c not in result and c not in a for c in b):
        return None
    grad_a, grad_b = f"{result},{b}->{a}", f"{a},{result}->{b}"

    def run(inputs, outputs, grads):
        x, y = inputs[0], inputs[1]
        g = grads[0]
        out = {}
        if 0 in ctx.grad_inputs:
            out[0] = torch.einsum(grad_a, g, y)
        if 1 in ctx.grad_inputs:
            out[1] = torch.einsum(grad_b, x, g)
        return in_grad_order(ctx, out)

    return run


FORWARD = {"linear": _linear, "matmul": _matmul, "bmm": _bmm, "einsum": _einsum}
BACKWARD = {"linear": _linear_backward, "matmul": _matmul_backward, "bmm": _bmm_backward, "einsum": _einsum_backward}
