"""gather (src/ops/gather.cc): index_select."""

import torch


def _index_select(attrs, inputs, outputs):
    dim = int(attrs["dim"])
    return lambda x, index: (torch.index_select(x, dim, index),)


FORWARD = {"index_select": _index_select}
