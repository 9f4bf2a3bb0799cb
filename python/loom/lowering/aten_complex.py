"""Rotary embeddings written with complex numbers (DeepSeek-V2, Llama 4: `view_as_real(view_as_complex(x) *
freqs_cis)`), capture="export": a traced complex tensor is carried as its real pairs (the real tensor that
view_as_complex read, last dim 2), multiplied by a constant complex tensor with real ops, (x0 + i x1)(a + i b)
= (x0 a - x1 b) + i (x0 b + x1 a), and view_as_real gives the pairs back. Other complex arithmetic is not
lowered."""

import torch

from .base import Meta, T

_PAIRS = "_complex_pairs"  # the lowering's set of the tensors that carry complex values as real pairs


def _pairs(cx):
    if not hasattr(cx, _PAIRS):
        setattr(cx, _PAIRS, set())
    return getattr(cx, _PAIRS)


def _view_as_complex(cx, args, kwargs, value):
    x = args[0]
    if not isinstance(x, T) or cx.shape(x)[-1] != 2:
        return None
    _pairs(cx).add(x)
    return x


def _view_as_real(cx, args, kwargs, value):
    x = args[0]
    return x if isinstance(x, T) and x in _pairs(cx) else None


def _complex_mul(real_handler):
    """aten.mul: a pair-carried complex tensor times a constant complex tensor as above; anything else by the
    real handler."""
    def lower(cx, args, kwargs, value):
        a, b = args[0], args[1]
        if isinstance(b, T) and b in _pairs(cx):
            a, b = b, a
        if not (isinstance(a, T) and a in _pairs(cx)):
            return real_handler(cx, args, kwargs, value)
        if not (isinstance(b, torch.Tensor) and b.is_complex()):
            return None
        return _times_constant(cx, a, b)
    return lower


def _times_constant(cx, x, c):
    shape, dtype = list(cx.shape(x)), cx.torch_dtype(x)
    half = shape[:-1]
    joined = list(torch.broadcast_shapes(tuple(half), tuple(c.shape)))
    parts = []
    for k in (0, 1):
        part = cx.emit("slice", [x], {"dim": len(shape) - 1, "start": k, "end": k + 1, "step": 1},
                       Meta(half + [1], dtype), suffix=f"part{k}")
        parts.append(cx.emit("squeeze", [part], {"dim": len(shape) - 1}, Meta(half, dtype), suffix=f"part{k}"))
    a, b = (cx.constant(v.to(dtype).contiguous()) for v in (c.real, c.imag))

    def times(u, v, name):
        return cx.emit("mul", [u, v], {}, Meta(joined, dtype), suffix=name)

    real = cx.emit("sub", [times(parts[0], a, "x0a"), times(parts[1], b, "x1b")], {}, Meta(joined, dtype),
                   suffix="real")
    imag = cx.emit("add", [times(parts[0], b, "x0b"), times(parts[1], a, "x1a")], {}, Meta(joined, dtype),
                   suffix="imag")
    columns = [cx.emit("unsqueeze", [v], {"dim": len(joined)}, Meta(joined + [1], dtype), suffix=f"{n}_pair")
               for v, n in ((real, "real"), (imag, "imag"))]
    out = cx.emit("concat", columns, {"dim": len(joined)}, Meta(joined + [2], dtype), suffix="pairs")
    _pairs(cx).add(out)
    return out
