"""routing (src/ops/routing.cc): topk, values and their positions along one dim."""

import torch


def _topk(attrs, inputs, outputs):
    k, dim = int(attrs["k"]), int(attrs.get("dim", -1))
    largest, ordered = bool(attrs.get("largest", True)), bool(attrs.get("sorted", True))
    return lambda x: tuple(torch.topk(x, k, dim, largest=largest, sorted=ordered))


FORWARD = {"topk": _topk}
