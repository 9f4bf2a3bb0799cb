"""What every lowering handler shares: engine tensor ids (T), output metadata (Meta) and operand helpers."""

import torch


class T(int):
    """An engine tensor id (a dynamic value: it depends on the inputs or the parameters)."""


class Meta:
    """The shape and dtype of an output that no fx node holds (an op a handler adds on the way)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype


def _is_tensor(x):
    return isinstance(x, T)


# ------------------------------------------------------------------------------------------------
# Helpers the handlers share. `cx` is the Lowering (tracer_lowering.py): cx.emit(type, inputs, attrs,
# value), cx.constant(value) (a buffer tensor holding a non-traced tensor or scalar), cx.alias(t).


def _arg(args, kwargs, index, name, default=None):
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _dims(value, rank):
    dims = [value] if isinstance(value, int) else list(value)
    return [d + rank if d < 0 else d for d in dims]


def _scalar_operand(cx, x, like, value):
    """A constant operand of a binary op as a rank-0 buffer of the tensor operand's dtype."""
    return cx.constant(torch.tensor(x, dtype=cx.torch_dtype(like)))
