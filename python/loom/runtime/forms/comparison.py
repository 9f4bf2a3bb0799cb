"""comparison (src/ops/comparison.cc): eq, ne, lt, le, gt, ge (boolean, no gradient), maximum, minimum."""

import torch


def _comparison(compare):
    return lambda attrs, inputs, outputs: (lambda a, b: (compare(a, b),))


FORWARD = {name: _comparison(compare) for name, compare in {
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "maximum": torch.maximum, "minimum": torch.minimum}.items()}
NOT_DIFFERENTIABLE = {"eq", "ne", "lt", "le", "gt", "ge"}  # boolean outputs
