"""The divisor of torch's mean over counted tokens (label != ignore_index) for the engine's cross_entropy /
nll_loss (src/ops/loss.cc): the whole batch's counted tokens, given to the loss as its third input.

It is a derived input (src/ir/derived_input.h) when the loss's labels are a graph input seen through slices,
pads with ignore_index and reshapes (HuggingFace's causal-LM shift: labels[:, 1:], or from transformers 4.5x
pad(labels, (0, 1), -100)[:, 1:]): the runtime and the interpreter count the whole labels of the step, so no
split of the batch (data parallelism, ZeRO, micro-batches of any pipeline schedule) waits for another's labels.
Labels computed otherwise are counted by ops over them (exact, but a pipeline's first micro-batch then waits
for every micro-batch's labels); constant labels are counted here and folded into a scale."""

import torch

from .base import Meta, T

# Ops that keep every label and its value, whatever the layout (a reshape after a slice, a cast to an integer).
_KEEPS_COUNT = {"view", "reshape", "flatten", "contiguous", "identity", "squeeze", "unsqueeze", "alias"}


def _producers(graph):
    return {out: op for op in graph.ops for out in op["outputs"]}


def labels_window(cx, labels, ignore):
    """(input tensor, trim) when the labels are an integer graph input through slices of step 1, pads with
    ignore_index and count-keeping ops: their counted tokens are the input's inside the window that drops
    trim[d] = [front, back] elements of dim d. None otherwise."""
    producer, chain, t = _producers(cx.graph), [], labels
    while cx.graph.tensors[t]["role"] != "input":
        op = producer.get(t)
        if op is None or not op["inputs"]:
            return None
        chain.append(op)
        t = op["inputs"][0]
    if cx.graph.tensors[t].get("derived") or cx.graph.tensors[t]["dtype"] in ("f64", "f32", "f16", "bf16"):
        return None
    shape = list(cx.graph.tensors[t]["shape"])
    offset, size, laid_out = [0] * len(shape), list(shape), True  # laid_out: dims are still the input's
    for op in reversed(chain):
        kind, attrs = op["type"], op["attrs"]
        if kind == "slice" and laid_out and attrs.get("step", 1) == 1:
            d = attrs["dim"] % len(size)
            start, end = max(0, attrs["start"]), min(size[attrs["dim"] % len(size)], attrs["end"])
            offset[d] += start
            size[d] = max(0, end - start)
        elif kind == "pad" and laid_out and attrs.get("value", 0.0) == ignore and len(attrs["pads"]) <= 2 * len(size):
            pads = attrs["pads"]  # torch's order: (before, after) of the last dim first
            for k in range(len(pads) // 2):
                d = len(size) - 1 - k
                offset[d] -= pads[2 * k]
                size[d] += pads[2 * k] + pads[2 * k + 1]
        elif kind in _KEEPS_COUNT or (kind == "cast" and attrs.get("dtype") in ("i64", "i32")):
            laid_out = False
        else:
            return None
    trim = []
    for d, whole in enumerate(shape):
        lo, hi = max(0, offset[d]), min(whole, offset[d] + size[d])
        if lo >= hi:
            return None  # nothing of the input counts: torch's mean is nan, left to the ops
        trim.append([lo, whole - hi])
    return t, trim


def counted_tokens(cx, labels, ignore):
    """The loss's third input: a derived input, or the count by ops (labels a traced tensor); or the number
    itself for constant labels (an int; None on the meta device, where their elements are unknown)."""
    if not isinstance(labels, T):
        return None if labels.device.type == "meta" else int((labels != ignore).sum())
    found = labels_window(cx, labels, ignore)
    if found is not None:
        source, trim = found
        return cx.derived_input(source, {"kind": "counted_tokens", "ignore_index": ignore,
                                         **({"trim": trim} if any(any(p) for p in trim) else {})})
    shape, scalar = cx.shape(labels), Meta((), torch.float32)
    ignored = cx.constant(torch.tensor(ignore, dtype=cx.torch_dtype(labels)))
    counted = cx.emit("ne", [labels, ignored], {}, Meta(shape, torch.bool), suffix="counted")
    ones = cx.emit("cast", [counted], {"dtype": "f32"}, Meta(shape, torch.float32), suffix="counted_f32")
    return cx.emit("sum", [ones], {"dims": list(range(len(shape)))}, scalar, suffix="counted_tokens")
