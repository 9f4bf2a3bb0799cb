"""shape (src/ops/shape.cc): reshape and its kin, transpose, permute, expand, split, concat, slice; their
backward, pure index ops that need no saved tensor. Data movement returns views where torch has one (as torch
modules do: a transpose or a split costs nothing, its reader reads the strides; reshape copies only what cannot
be viewed), so a program copies no more than the torch module it was traced from (compute.py)."""

import torch

from .common import in_grad_order, sum_to


def _reshape(attrs, inputs, outputs):
    # The local output shape is what matters: attributes name the whole tensor's shape.
    shape = outputs[0][0]
    return lambda x: (x.reshape(shape),)


def _identity(attrs, inputs, outputs):
    return lambda x: (x,)


def _copy(attrs, inputs, outputs):
    # torch's .contiguous(): a copy only where the input is a strided view.
    return lambda x: (x.contiguous(),)


def _transpose(attrs, inputs, outputs):
    a, b = int(attrs["dim0"]), int(attrs["dim1"])
    return lambda x: (x.transpose(a, b),)


def _permute(attrs, inputs, outputs):
    dims = list(attrs["dims"])
    return lambda x: (x.permute(dims),)


def _expand(attrs, inputs, outputs):
    shape = outputs[0][0]
    return lambda x: (x.expand(shape),)


def _split(attrs, inputs, outputs):
    rank = len(inputs[0][0])
    dim = int(attrs.get("dim", 0)) % rank
    sizes = [shape[dim] for shape, _ in outputs]
    return lambda x: tuple(torch.split(x, sizes, dim))


def _concat(attrs, inputs, outputs):
    dim = int(attrs.get("dim", 0))
    return lambda *xs: (torch.cat(xs, dim),)


def _slice_index(attrs, x, y):
    """x[start:end:step] along dim, over pieces: output element g of the whole reads input element
    start + g * step of the whole (negative start as Python's, clamped as the reference kernel does), the
    pieces' offsets and steps saying where the local elements sit. The index into the input piece x that
    the output piece y reads; None when x does not hold those elements as a strided range."""
    rank = len(x["shape"])
    dim = int(attrs["dim"]) % rank
    n = x.get("full", x["shape"])[dim]
    start = int(attrs.get("start", 0))
    start = min(max(start + n if start < 0 else start, 0), n)
    step = int(attrs.get("step", 1))
    x_step, y_step = (x.get("step") or [1] * rank)[dim], (y.get("step") or [1] * rank)[dim]
    x_at, y_at = (x.get("offset") or [0] * rank)[dim], (y.get("offset") or [0] * rank)[dim]
    first, stride = start + y_at * step - x_at, step * y_step  # the first element read, from x's start
    if first % x_step or stride % x_step:
        return None
    first, stride = first // x_step, stride // x_step
    length = y["shape"][dim]
    index = [slice(None)] * rank
    index[dim] = slice(first, first + (length - 1) * stride + 1, stride)
    return tuple(index)


def _slice(attrs, inputs, outputs):
    index = _slice_index(attrs, {"shape": inputs[0][0]}, {"shape": outputs[0][0]})  # whole tensors
    return lambda x: (x[index],)


def _placed_slice(attrs, inputs, outputs):
    index = _slice_index(attrs, inputs[0], outputs[0])
    if index is None:
        return None  # not a strided range of the input piece: the plain form's error
    return lambda t: (t[index],)


# --- backward (no saved tensor) -----------------------------------------------------------------------


def _reshape_backward(ctx):
    shape = ctx.in_shape(0)
    return lambda inputs, outputs, grads: (grads[0].reshape(shape),)


def _transpose_backward(ctx):
    a, b = int(ctx.attrs["dim0"]), int(ctx.attrs["dim1"])
    return lambda inputs, outputs, grads: (grads[0].transpose(a, b),)


def _permute_backward(ctx):
    dims = [int(d) % len(ctx.in_shape(0)) for d in ctx.attrs["dims"]]
    inverse = [0] * len(dims)
    for position, d in enumerate(dims):
        inverse[d] = position
    return lambda inputs, outputs, grads: (grads[0].permute(inverse),)


def _expand_backward(ctx):
    shape = ctx.in_shape(0)
    return lambda inputs, outputs, grads: (sum_to(grads[0], shape),)


def _split_backward(ctx):
    rank = len(ctx.in_shape(0))
    dim = int(ctx.attrs.get("dim", 0)) % rank

    def run(inputs, outputs, grads):
        parts = []
        for k, spec in enumerate(ctx.outputs):
            g = grads[ctx.grad_outputs.index(k)] if k in ctx.grad_outputs else None
            parts.append(g if g is not None else
                         torch.zeros(tuple(spec["shape"]), dtype=ctx.in_dtype(0), device=grads[0].device))
        return (torch.cat(parts, dim),)

    return run


def _concat_backward(ctx):
    dim = int(ctx.attrs.get("dim", 0))
    sizes = [ctx.in_shape(i)[dim] for i in range(len(ctx.inputs))]

    def run(inputs, outputs, grads):
        pieces = torch.split(grads[0], sizes, dim)
        return in_grad_order(ctx, dict(enumerate(pieces)))

    return run


def _slice_backward(ctx):
    """The gradient lands where the placed forward read (_slice_index)."""
    shape = ctx.in_shape(0)
    index = _slice_index(ctx.attrs, ctx.inputs[0], ctx.outputs[0])
    if index is None:
        return None  # not a strided range of the input shard: autograd over the forward form

    def run(inputs, outputs, grads):
        g = grads[0]
        out = torch.zeros(shape, dtype=g.dtype, device=g.device)
        out[index] = g
        return (out,)

    return run


_RESHAPES = ("reshape", "view", "flatten", "squeeze", "unsqueeze")
FORWARD = {**{name: _reshape for name in _RESHAPES}, "identity": _identity, "contiguous": _copy,
           "transpose": _transpose, "permute": _permute, "expand": _expand, "chunk": _split, "split": _split,
           "concat": _concat, "slice": _slice}
PLACED = {"slice": _placed_slice}
BACKWARD = {**{name: _reshape_backward for name in (*_RESHAPES, "identity", "contiguous")},
            "transpose": _transpose_backward, "permute": _permute_backward, "expand": _expand_backward,
            "chunk": _split_backward, "split": _split_backward, "concat": _concat_backward, "slice": _slice_backward}
