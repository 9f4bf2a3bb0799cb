"""Complex numbers of transformers 5 models, capture="export": rotary embeddings (DeepSeek-V2, Llama 4:
`view_as_real(view_as_complex(x) * freqs_cis)`) and FNet's Fourier transforms (`fft(fft(x, -1), -2).real`).
A traced complex tensor is carried as its real pairs (a real tensor, last dim 2: what view_as_complex read,
or a real tensor cast to complex with a zero imaginary part); a constant complex factor multiplies it with
real ops, (x0 + i x1)(a + i b) = (x0 a - x1 b) + i (x0 b + x1 a); a discrete Fourier transform along a dim is
two einsums with the constant cosine and sine matrices, F = C - i S (the inverse C + i S), scaled as its
normalization says; view_as_real gives the pairs back. Other complex arithmetic is not lowered."""

import math

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


def _pairs_of_real(cx, x, suffix):
    """x + 0i as pairs: [x, 0 x] along a new last dim (the zeros split as x does)."""
    shape, dtype = list(cx.shape(x)), cx.torch_dtype(x)
    zeros = cx.emit("scale", [x], {"factor": 0.0}, Meta(shape, dtype), suffix=f"{suffix}_imag")
    columns = [cx.emit("unsqueeze", [v], {"dim": len(shape)}, Meta(shape + [1], dtype), suffix=f"{suffix}_{n}")
               for v, n in ((x, "re"), (zeros, "im"))]
    out = cx.emit("concat", columns, {"dim": len(shape)}, Meta(shape + [2], dtype), suffix=f"{suffix}_pairs")
    _pairs(cx).add(out)
    return out


def _to_complex(real_handler):
    """_to_copy / to of a real traced tensor to a complex dtype: its pairs; anything else by the real handler."""
    def lower(cx, args, kwargs, value):
        x = args[0]
        if isinstance(value, torch.Tensor) and value.is_complex():
            if isinstance(x, T) and x not in _pairs(cx) and cx.torch_dtype(x).is_floating_point:
                return _pairs_of_real(cx, x, "complex")
            return x if isinstance(x, T) and x in _pairs(cx) else None
        return real_handler(cx, args, kwargs, value)
    return lower


def _fft(cx, x, dims, normalization, forward):
    """The DFT of pairs `x` along `dims` (of the complex tensor: the pairs' last dim excluded)."""
    shape, dtype = list(cx.shape(x)), cx.torch_dtype(x)
    rank = len(shape) - 1
    half = shape[:-1]
    letters = "abcdefghijklmnopqrstuvw"[:rank]
    parts = []
    for k in (0, 1):
        part = cx.emit("slice", [x], {"dim": rank, "start": k, "end": k + 1, "step": 1}, Meta(half + [1], dtype),
                       suffix=f"fft_part{k}")
        parts.append(cx.emit("squeeze", [part], {"dim": rank}, Meta(half, dtype), suffix=f"fft_part{k}"))
    re, im = parts
    sign = 1.0 if forward else -1.0
    for d in sorted(int(d) % rank for d in dims):
        n = half[d]
        angle = 2 * math.pi * torch.outer(torch.arange(n, dtype=torch.float64), torch.arange(n, dtype=torch.float64)) / n
        scale = {0: 1.0, 1: 1 / math.sqrt(n), 2: 1.0 / n}[int(normalization)]
        cos, sin = (cx.constant((f(angle) * scale).to(dtype)) for f in (torch.cos, torch.sin))
        equation = f"z{letters[d]},{letters}->{letters.replace(letters[d], 'z')}"

        def along(matrix, v, name):
            return cx.emit("einsum", [matrix, v], {"equation": equation}, Meta(half, dtype), suffix=name)

        # (C - i s S)(re + i im) = C re + s S im + i (C im - s S re)
        s_im, s_re = along(sin, im, "sin_im"), along(sin, re, "sin_re")
        if sign < 0:
            s_im = cx.emit("neg", [s_im], {}, Meta(half, dtype), suffix="neg_sin_im")
            s_re = cx.emit("neg", [s_re], {}, Meta(half, dtype), suffix="neg_sin_re")
        re, im = (cx.emit("add", [along(cos, re, "cos_re"), s_im], {}, Meta(half, dtype), suffix="fft_re"),
                  cx.emit("sub", [along(cos, im, "cos_im"), s_re], {}, Meta(half, dtype), suffix="fft_im"))
    columns = [cx.emit("unsqueeze", [v], {"dim": rank}, Meta(half + [1], dtype), suffix=f"fft_{n}")
               for v, n in ((re, "re"), (im, "im"))]
    out = cx.emit("concat", columns, {"dim": rank}, Meta(half + [2], dtype), suffix="fft_pairs")
    _pairs(cx).add(out)
    return out


def _fft_c2c(cx, args, kwargs, value):
    from .aten_math import named
    a = named(cx.node.target, args, kwargs)
    x = a["self"]
    if not (isinstance(x, T) and x in _pairs(cx)):
        return None
    return _fft(cx, x, a["dim"], a["normalization"], bool(a["forward"]))


def _fft_r2c(cx, args, kwargs, value):
    """The DFT of a real tensor; onesided keeps the last transformed dim's first n // 2 + 1 frequencies."""
    from .aten_math import named
    a = named(cx.node.target, args, kwargs)
    x = a["self"]
    if not isinstance(x, T) or not cx.torch_dtype(x).is_floating_point:
        return None
    out = _fft(cx, _pairs_of_real(cx, x, "fft_input"), a["dim"], a["normalization"], True)
    if a["onesided"]:
        shape, last = list(cx.shape(out)), int(a["dim"][-1]) % cx.rank(x)
        keep = shape[last] // 2 + 1
        shape[last] = keep
        out = cx.emit("slice", [out], {"dim": last, "start": 0, "end": keep, "step": 1}, Meta(shape, cx.torch_dtype(x)),
                      suffix="onesided")
        _pairs(cx).add(out)
    return out
