"""x[index] = v lowered as a new value of x (the engine's tensors are values, not memory): where(mask, v placed
in x's shape, x), the mask a constant true on the written region (integers: x * keep + placed, exact). The
constant masks keep size 1 along the dims where they do not vary (the ops broadcast them): Longformer's
diagonal writes into [b s h 513] scores are masks of [1 1 1 513], not 2 million stored elements each."""

import torch

from .lowering import Meta as _Meta, T


def write(cx, x, index, v):
    """x with x[index] = v, as a new value (None where not lowered): where(mask, v placed in x's shape, x),
    the mask a constant true on the written region. Basic indexing only (slices of step 1, integers)."""
    if not isinstance(x, (T, torch.Tensor)):
        return None
    base = cx.tensor(x)
    shape, dtype = list(cx.shape(base)), cx.torch_dtype(base)
    index = index if isinstance(index, tuple) else (index,)
    if any(not (isinstance(i, int) or i is Ellipsis or (isinstance(i, slice) and i.step in (None, 1)))
           for i in index):
        return None
    probe = torch.zeros(shape, dtype=torch.bool)
    probe[index] = True
    probe = _collapsed(probe)

    def blend(placed):  # placed: the written values in x's shape, zero elsewhere
        if dtype.is_floating_point or dtype == torch.bool:
            return cx.emit("where", [cx.constant(probe), placed, base], {}, _Meta(shape, dtype),
                             suffix="written")
        # Integers (XGLM's shifted labels): x * keep + placed, exact; the engine's where gives a float or bool.
        kept = cx.emit("mul", [base, cx.constant((~probe).to(dtype))], {}, _Meta(shape, dtype), suffix="kept")
        return cx.emit("add", [kept, placed], {}, _Meta(shape, dtype), suffix="written")

    if not isinstance(v, T):  # a constant written: x's new value where the mask is, as one buffer
        full = torch.zeros(shape, dtype=dtype)
        full[index] = v.to(dtype) if isinstance(v, torch.Tensor) else v
        return blend(cx.constant(_collapsed(full)))
    # The region with the dims an integer index removes kept as size 1, then padded to x's shape.
    region = list(torch.zeros(shape)[index].shape)
    if cx.torch_dtype(v) != dtype:
        v = cx.emit("cast", [v], {"dtype": cx.dtype_name(dtype)}, _Meta(cx.shape(v), dtype), suffix="cast")
    if list(cx.shape(v)) != region:
        v = cx.emit("expand", [v], {"shape": region}, _Meta(region, dtype), suffix="expand")
    spans = []  # (start, stop) of the region in every dim of x
    expanded = []
    for i in index:
        expanded.extend([slice(None)] * (len(shape) - sum(1 for j in index if j is not Ellipsis))
                        if i is Ellipsis else [i])
    expanded += [slice(None)] * (len(shape) - len(expanded))
    lifted = []
    for d, (i, size) in enumerate(zip(expanded, shape)):
        if isinstance(i, int):
            start = i + size if i < 0 else i
            spans.append((start, start + 1))
            lifted.append(1)
        else:
            start, stop, _ = i.indices(size)
            spans.append((start, max(start, stop)))
            lifted.append(max(0, stop - start))
    if 0 in lifted:
        return base  # an empty region: nothing written
    if lifted != region:
        v = cx.emit("reshape", [v], {"shape": lifted}, _Meta(lifted, dtype), suffix="lifted")
    pads = [p for (start, stop), size in reversed(list(zip(spans, shape))) for p in (start, size - stop)]
    if any(pads):
        v = cx.emit("pad", [v], {"pads": pads}, _Meta(shape, dtype), suffix="placed")
    return blend(v)


def _collapsed(t):
    """t with size 1 along every dim where all its slices are equal (it broadcasts back to t)."""
    for d in range(t.dim()):
        if t.shape[d] > 1 and torch.equal(t, t.narrow(d, 0, 1).expand_as(t)):
            t = t.narrow(d, 0, 1)
    return t.contiguous()
