"""embedding (src/ops/embedding.cc): a vocabulary shard holds rows [offset, offset + rows), so other ids look
up zeros (placed) and add nothing to its gradient."""

import torch
import torch.nn.functional as F

from .common import offset


def _embedding(attrs, inputs, outputs):
    return lambda ids, w: (F.embedding(ids, w),)


def _placed_embedding(attrs, inputs, outputs):
    first = offset(inputs[1])[0]
    rows = inputs[1]["shape"][0]

    def run(ids, weight):
        local = ids - first
        inside = (local >= 0) & (local < rows)
        looked_up = F.embedding(torch.where(inside, local, torch.zeros_like(local)), weight)
        return (looked_up * inside.unsqueeze(-1).to(looked_up.dtype),)

    return run


def _embedding_backward(ctx):
    """Rows of a vocabulary shard start at its offset: ids outside it add nothing."""
    if not ctx.saved_inputs or ctx.grad_inputs != [1]:
        return None
    first = offset(ctx.inputs[1])[0]
    rows, width = ctx.in_shape(1)

    def run(inputs, outputs, grads):
        ids, g = inputs[0], grads[0]
        local = ids - first
        inside = (local >= 0) & (local < rows)
        index = torch.where(inside, local, torch.zeros_like(local)).reshape(-1)
        values = (g * inside.unsqueeze(-1).to(g.dtype)).reshape(-1, width)
        return (torch.zeros((rows, width), dtype=g.dtype, device=g.device).index_add_(0, index, values),)

    return run


FORWARD = {"embedding": _embedding}
INDEX_INPUTS = {"embedding": {0: (1, 0)}}  # the ids index the weight's rows
PLACED = {"embedding": _placed_embedding}
BACKWARD = {"embedding": _embedding_backward}
