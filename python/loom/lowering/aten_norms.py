"""Norms of transformers 5 models as torch.export writes them (capture="export"): vector norms (YOSO, Zaya,
Inkling, NeoMME) and the variance (xLSTM's multi-head norm) spelled with registry ops, group norm (PoolFormer,
MobileViT V2). Training-mode batch norm
(ResNet, MobileNet, CvT, EfficientNet) is aten.py's table entry: its running statistics are the graph's state."""

import math

from .aten_math import named
from .base import Meta
from .compute import _group_norm
from .shapes import root_of_squares


def _vector_norm(cx, args, kwargs, value):
    """linalg_vector_norm(x, ord, dim, keepdim): ord 2 as sqrt(sum(x^2)) (0 with no gradient at 0), 1 as
    sum(|x|), inf as amax(|x|), over `dim` (every dim when None). Other orders, and a dtype cast, are not
    lowered."""
    a = named(cx.node.target, args, kwargs)
    x, order, keep = cx.tensor(a["self"]), float(a["ord"]), bool(a["keepdim"])
    if a.get("dtype") is not None or not cx.torch_dtype(x).is_floating_point:
        return None
    rank, dtype = cx.rank(x), cx.torch_dtype(x)
    dims = a["dim"]
    dims = list(range(rank)) if dims is None or dims == [] else [d % rank for d in
                                                                 (dims if isinstance(dims, (list, tuple)) else [dims])]
    shape = list(cx.shape(x))
    attrs = {"dims": dims, **({"keepdim": True} if keep else {})}
    if order == 2:
        squares = cx.emit("square", [x], {}, Meta(shape, dtype), suffix="squares")
        total = cx.emit("sum", [squares], attrs, Meta(list(value.shape), dtype), suffix="sum_squares")
        return root_of_squares(cx, total, value)  # a zero vector: 0 and no NaN gradient (Swin V2's padding)
    magnitude = cx.emit("abs", [x], {}, Meta(shape, dtype), suffix="magnitude")
    if order == 1:
        return cx.emit("sum", [magnitude], attrs, value)
    if order == math.inf:
        return cx.emit("amax", [magnitude], attrs, value)
    return None


def _var(cx, args, kwargs, value):
    """var(x, dim, correction, keepdim): sum((x - mean)^2) / (n - correction) over `dim` (every dim when
    None), n the number of elements reduced; torch's default correction is 1 (Bessel's)."""
    a = named(cx.node.target, args, kwargs)
    x = cx.tensor(a["self"])
    if not cx.torch_dtype(x).is_floating_point:
        return None
    rank, dtype, shape = cx.rank(x), cx.torch_dtype(x), list(cx.shape(x))
    dims = a["dim"]
    dims = list(range(rank)) if dims is None or dims == [] else [d % rank for d in
                                                                 (dims if isinstance(dims, (list, tuple)) else [dims])]
    correction = 1 if a.get("correction") is None else float(a["correction"])
    count = math.prod(shape[d] for d in dims)
    if count - correction <= 0:
        return None  # torch gives inf or nan: not a training graph's value
    kept = [1 if d in dims else n for d, n in enumerate(shape)]
    mean = cx.emit("mean", [x], {"dims": dims, "keepdim": True}, Meta(kept, dtype), suffix="mean")
    centered = cx.emit("sub", [x, mean], {}, Meta(shape, dtype), suffix="centered")
    squares = cx.emit("square", [centered], {}, Meta(shape, dtype), suffix="squares")
    attrs = {"dims": dims, **({"keepdim": True} if a.get("keepdim") else {})}
    total = cx.emit("sum", [squares], attrs, Meta(list(value.shape), dtype), suffix="sum_squares")
    return cx.emit("scale", [total], {"factor": 1.0 / (count - correction)}, value)


def _native_group_norm(cx, args, kwargs, value):
    """native_group_norm(x, weight, bias, N, C, HxW, groups, eps) -> (out, mean, rstd): the registry's
    group_norm; the saved statistics are the backward's, which the engine derives itself."""
    a = named(cx.node.target, args, kwargs)
    out = _group_norm(cx, [a["input"], a["group"], a["weight"], a["bias"], a["eps"]], {}, value[0])
    return None if out is None else (out, None, None)
