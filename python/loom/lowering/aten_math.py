"""ATen ops of transformers 5 models spelled with registry ops or mapped onto new ones (capture="export"):
remainder by a number (CANINE's hashed ids), index_put under a boolean mask (Gemma 3's `ids[image_mask] = 0`),
a | b of boolean masks, ReLU6 (hardtanh), resizing (upsample), in-place dropout's mask (bernoulli). Norms are
in aten_norms.py, attention with computed masks in aten_attention.py."""

import math

import torch

from .aten_masked import index_put_rows, mask_of_columns
from .aten_strided import put_at_positions
from .base import Meta, T


def named(op, args, kwargs):
    from .aten import named_arguments
    return named_arguments(op, args, kwargs)


def _remainder(cx, args, kwargs, value):
    """x % d for a traced x and a number d: the registry's remainder (Python's sign rule)."""
    a = named(cx.node.target, args, kwargs)
    x, divisor = a["self"], a["other"]
    if not isinstance(x, T) or isinstance(divisor, (T, torch.Tensor)) or not divisor:
        return None
    return cx.emit("remainder", [x], {"divisor": float(divisor)}, value)


def _index_put_masked(cx, args, kwargs, value):
    """x[mask] = v (index_put with one boolean index, not accumulating): where(mask, v, x), the mask given
    trailing unit dims when it indexes x's leading dims, v one number or one row of x's trailing dims (then
    the same for every picked position), or one row per picked position (aten_masked.py)."""
    a = named(cx.node.target, args, kwargs)
    x, indices, v = cx.tensor(a["self"]), list(a["indices"]), a["values"]
    spelled = mask_of_columns(cx, list(cx.node.args[1]))  # x[mask.nonzero().unbind(1)] = v
    if spelled is not None and spelled[0] == 0:
        indices = [spelled[1]]
    if any(isinstance(i, torch.Tensor) and i.dtype != torch.bool for i in indices):  # constant integer positions
        return put_at_positions(cx, a["self"], indices, v, bool(a.get("accumulate")), value)
    if a.get("accumulate") or len(indices) != 1 or indices[0] is None:
        return None
    mask = indices[0]
    mask_dtype = cx.torch_dtype(mask) if isinstance(mask, T) else mask.dtype
    if mask_dtype != torch.bool:
        return None
    shape, mask_shape = list(cx.shape(x)), list(cx.shape(mask) if isinstance(mask, T) else mask.shape)
    if shape[:len(mask_shape)] != mask_shape:
        return None
    trailing = shape[len(mask_shape):]
    v_shape = list(cx.shape(v) if isinstance(v, T) else torch.as_tensor(v).shape)
    core = v_shape[next((i for i, n in enumerate(v_shape) if n != 1), len(v_shape)):]  # leading 1s dropped
    if math.prod(v_shape) == 1:
        target = []
    elif trailing and core == trailing:
        target = trailing
    else:  # one row per true element (X-MOD's adapters writing their rows back)
        return index_put_rows(cx, x, mask, v, value) if isinstance(v, (T, torch.Tensor)) else None
    mask = cx.tensor(mask)
    if trailing:
        full = mask_shape + [1] * len(trailing)
        mask = cx.emit("reshape", [mask], {"shape": full}, Meta(full, torch.bool), suffix="mask")
    if isinstance(v, T):
        if v_shape != target:
            v = cx.emit("reshape", [v], {"shape": target}, Meta(target, cx.torch_dtype(v)), suffix="values")
        if cx.torch_dtype(v) != value.dtype:
            v = cx.emit("cast", [v], {"dtype": cx.dtype_name(value.dtype)}, Meta(target, value.dtype),
                        suffix="values_cast")
    else:
        v = cx.constant(torch.as_tensor(v).to(value.dtype).reshape(target))
    return cx.emit("where", [mask, v, x], {}, value)


def _logical_or(cx, args, kwargs, value):
    """a | b of boolean tensors: where(a, a, b), true wherever a is."""
    a, b = args[0], args[1]
    if not all(isinstance(t, (T, torch.Tensor)) and (cx.torch_dtype(t) if isinstance(t, T) else t.dtype) == torch.bool
               for t in (a, b)):
        return None
    a, b = cx.tensor(a), cx.tensor(b)
    return cx.emit("where", [a, a, b], {}, value)


def _bitwise_and(cx, args, kwargs, value):
    """a & b: of two boolean tensors, where(a, b, a); of a boolean tensor and a constant integer one (CpmAnt's
    attention mask, an int32 0/1 mask and a boolean one), the boolean promoted to 0 / 1 as torch does, so
    where(a, b & 1, 0)."""
    from .compute import _logical_and
    a = named(cx.node.target, args, kwargs)
    x, y = a["self"], a["other"]
    dtypes = [cx.torch_dtype(v) if isinstance(v, T) else getattr(v, "dtype", None) for v in (x, y)]
    if dtypes == [torch.bool, torch.bool]:
        return _logical_and(cx, [x, y], {}, value)
    if torch.bool not in dtypes or value.dtype.is_floating_point or value.dtype == torch.bool:
        return None
    mask, other = (x, y) if dtypes[0] == torch.bool else (y, x)
    if not isinstance(other, torch.Tensor):  # a traced integer operand: not lowered
        return None
    low_bit = cx.constant((other.to(value.dtype) & 1).expand(value.shape).contiguous())
    return cx.emit("where", [cx.tensor(mask), low_bit, cx.constant(torch.zeros((), dtype=value.dtype))], {}, value)


def _constant_pad(cx, args, kwargs, value):
    """constant_pad_nd(x, pad, value) with negative pads too (RWKV's time shift, (0, 0, 1, -1)): the negative
    ends cropped by a slice, then the positive ones padded."""
    from .shapes import _getitem, _pad
    a = named(cx.node.target, args, kwargs)
    x, pads = a["self"], [int(p) for p in a["pad"]]
    if any(p < 0 for p in pads):
        shape = list(cx.shape(x))
        index = [slice(None)] * len(shape)
        for k in range(0, len(pads), 2):  # pads name the last dim first
            d = len(shape) - 1 - k // 2
            before, after = pads[k], pads[k + 1]
            index[d] = slice(max(0, -before), shape[d] - max(0, -after))
        cropped = [len(range(*s.indices(n))) for s, n in zip(index, shape)]
        x = _getitem(cx, [x, tuple(index)], {}, Meta(cropped, value.dtype))
        pads = [max(0, p) for p in pads]
    return _pad(cx, [x, pads], {"value": a.get("value")}, value)


def _hardtanh(cx, args, kwargs, value):
    """hardtanh(x, min, max) (ReLU6 of MobileNet: 0 and 6): clamp."""
    a = named(cx.node.target, args, kwargs)
    return cx.emit("clamp", [cx.tensor(a["self"])], {"min": float(a["min_val"]), "max": float(a["max_val"])}, value)


def _upsample(mode):
    """upsample_bilinear2d.vec / upsample_nearest2d.vec: the fx route's F.interpolate lowering."""
    def lower(cx, args, kwargs, value):
        from .shapes import _interpolate
        a = named(cx.node.target, args, kwargs)
        scales = a.get("scale_factors")
        return _interpolate(cx, [a["input"], None, tuple(scales) if scales else None, mode, a.get("align_corners")],
                            {}, value)
    return lower


def _bernoulli_keep(cx, args, kwargs, value):
    """bernoulli(x, p) with a number p (in-place dropout decomposed: `empty_like(x).bernoulli_(1 - p)`, then
    divided by 1 - p and multiplied in; x's values are not read): the registry's dropout of ones at 1 - p
    (0 or 1 / p), scaled by p, so the mask is drawn as the dropout op draws its own."""
    a = named(cx.node.target, args, kwargs)
    keep = a.get("p")
    if not isinstance(keep, float) or not 0.0 < keep <= 1.0:
        return None
    shape, dtype = list(value.shape), value.dtype
    if keep == 1.0:
        return cx.constant(torch.ones(shape, dtype=dtype))
    kept = cx.emit("dropout", [cx.constant(torch.ones(shape, dtype=dtype))], {"p": 1.0 - keep}, Meta(shape, dtype),
                   suffix="kept")
    return cx.emit("scale", [kept], {"factor": keep}, value)
