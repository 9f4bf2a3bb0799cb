"""The handler tables: functions and methods, looked up by the callable (call_function) or the method
name (call_method)."""

import operator

import torch
import torch.nn.functional as F

from .compute import (
    _add_, _addmm, _baddbmm, _binary, _cross_entropy, _dropout, _einsum, _embedding, _fill_, _gather, _gelu,
    _group_norm, _layer_norm, _linear, _logical_and, _matmul, _mse_loss, _nll_loss, _pow, _rms_norm, _rsub, _sdpa,
    _softmax, _softplus, _stack, _unary,
)
from .vision import (
    _adaptive_avg_pool2d, _batch_norm, _conv1d, _conv2d, _hardswish, _pool2d,
)
from .shapes import (
    _chunk, _clamp, _compare, _concat, _contiguous, _convert, _cumsum, _detach, _expand, _extreme, _flatten,
    _getattr, _getitem, _index_select, _interpolate, _like, _masked_fill, _norm, _normalize, _pad, _permute,
    _reduce, _repeat, _reshape, _shape_only, _split, _squeeze, _t, _transpose, _unsqueeze, _where,
)


FUNCTIONS = {
    operator.add: _binary("add"), torch.add: _binary("add"),
    operator.sub: _binary("sub"), torch.sub: _binary("sub"), torch.rsub: _rsub,
    operator.mul: _binary("mul"), torch.mul: _binary("mul"),
    operator.truediv: _binary("div"), torch.div: _binary("div"),
    operator.neg: _unary("neg"), torch.neg: _unary("neg"),
    operator.pow: _pow, torch.pow: _pow,
    operator.matmul: _matmul, torch.matmul: _matmul, torch.bmm: _matmul, torch.addmm: _addmm,
    operator.getitem: _getitem,
    torch.tanh: _unary("tanh"), F.tanh: _unary("tanh"), torch.sigmoid: _unary("sigmoid"), F.sigmoid: _unary("sigmoid"),
    torch.exp: _unary("exp"), torch.log: _unary("log"), torch.sqrt: _unary("sqrt"), torch.rsqrt: _unary("rsqrt"),
    torch.abs: _unary("abs"), torch.square: _unary("square"),
    torch.relu: _unary("relu"), F.relu: _unary("relu"), F.silu: _unary("silu"), F.gelu: _gelu,
    torch.softmax: _softmax("softmax"), F.softmax: _softmax("softmax"),
    torch.log_softmax: _softmax("log_softmax"), F.log_softmax: _softmax("log_softmax"),
    F.dropout: _dropout, torch.dropout: _dropout,
    F.linear: _linear, F.embedding: _embedding, F.layer_norm: _layer_norm,
    F.scaled_dot_product_attention: _sdpa,
    F.cross_entropy: _cross_entropy, F.mse_loss: _mse_loss,
    torch.reshape: _reshape("reshape"), torch.flatten: _flatten, torch.permute: _permute,
    torch.transpose: _transpose, torch.t: _t, torch.unsqueeze: _unsqueeze, torch.squeeze: _squeeze,
    torch.split: _split, torch.chunk: _chunk, torch.cat: _concat, torch.concat: _concat,
    torch.masked_fill: _masked_fill, torch.where: _where, torch.clamp: _clamp,
    torch.sum: _reduce("sum"), torch.mean: _reduce("mean"), torch.amax: _reduce("amax"),
    F.conv1d: _conv1d, F.softplus: _softplus, F.hardswish: _hardswish, F.nll_loss: _nll_loss,
    torch.gather: _gather,
    operator.and_: _logical_and, torch.logical_and: _logical_and,
    getattr: _getattr, torch.clone: _contiguous, F.relu6: _unary("clamp", min=0.0, max=6.0),
    torch.baddbmm: _baddbmm, torch.einsum: _einsum, torch.stack: _stack, F.group_norm: _group_norm,
    F.conv2d: _conv2d, torch.conv2d: _conv2d, F.batch_norm: _batch_norm,
    F.max_pool2d: _pool2d("max_pool2d"), torch.max_pool2d: _pool2d("max_pool2d"),
    F.avg_pool2d: _pool2d("avg_pool2d"), F.adaptive_avg_pool2d: _adaptive_avg_pool2d,
    operator.eq: _compare("eq"), torch.eq: _compare("eq"), operator.ne: _compare("ne"), torch.ne: _compare("ne"),
    operator.lt: _compare("lt"), torch.lt: _compare("lt"), operator.le: _compare("le"), torch.le: _compare("le"),
    operator.gt: _compare("gt"), torch.gt: _compare("gt"), operator.ge: _compare("ge"), torch.ge: _compare("ge"),
    torch.cumsum: _cumsum, torch.index_select: _index_select, F.pad: _pad, F.interpolate: _interpolate,
    torch.zeros_like: _shape_only(), torch.ones_like: _shape_only(), torch.full_like: _shape_only(),
    torch.empty_like: _shape_only(empty=True),
    torch.maximum: _compare("maximum"), torch.minimum: _compare("minimum"), torch.max: _extreme("maximum", "amax"),
    torch.min: _extreme("minimum", None), torch.detach: _detach,
    torch.norm: _norm, F.normalize: _normalize,
}
if hasattr(F, "rms_norm"):
    FUNCTIONS[F.rms_norm] = _rms_norm

METHODS = {
    "add": _binary("add"), "sub": _binary("sub"), "mul": _binary("mul"), "div": _binary("div"),
    "neg": _unary("neg"), "pow": _pow, "matmul": _matmul, "bmm": _matmul,
    "tanh": _unary("tanh"), "sigmoid": _unary("sigmoid"), "exp": _unary("exp"), "log": _unary("log"),
    "sqrt": _unary("sqrt"), "rsqrt": _unary("rsqrt"), "abs": _unary("abs"), "relu": _unary("relu"),
    "softmax": _softmax("softmax"), "log_softmax": _softmax("log_softmax"),
    "view": _reshape("view"), "reshape": _reshape("reshape"), "flatten": _flatten, "permute": _permute,
    "transpose": _transpose, "t": _t, "unsqueeze": _unsqueeze, "squeeze": _squeeze, "expand": _expand,
    "split": _split, "chunk": _chunk, "contiguous": _contiguous,
    "to": _convert, "type": _convert, "type_as": _convert, "float": _convert, "half": _convert,
    "bfloat16": _convert, "double": _convert, "long": _convert, "int": _convert, "bool": _convert,
    "masked_fill": _masked_fill, "clamp": _clamp, "sum": _reduce("sum"), "mean": _reduce("mean"),
    "amax": _reduce("amax"), "baddbmm": _baddbmm, "clone": _contiguous,
    "expand_as": _like("expand"), "reshape_as": _like("reshape"), "view_as": _like("view"),
    "eq": _compare("eq"), "ne": _compare("ne"), "lt": _compare("lt"), "le": _compare("le"), "gt": _compare("gt"),
    "ge": _compare("ge"), "cumsum": _cumsum, "index_select": _index_select,
    "new_zeros": _shape_only(), "new_ones": _shape_only(), "new_full": _shape_only(),
    "new_empty": _shape_only(empty=True), "maximum": _compare("maximum"), "minimum": _compare("minimum"),
    "max": _extreme("maximum", "amax"), "min": _extreme("minimum", None), "detach": _detach, "norm": _norm,
    "fill_": _fill_, "gather": _gather, "add_": _add_,
    "repeat": _repeat,
}
