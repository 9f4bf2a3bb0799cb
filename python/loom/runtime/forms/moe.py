"""moe (src/ops/moe.cc): mixture-of-experts dispatch and combine; the capacity gate has no torch form."""

import torch


def _moe_dispatch(attrs, inputs, outputs):
    return lambda x, mask: (torch.einsum("gth,gtec->egch", x, mask.to(x.dtype)),)


def _moe_combine(attrs, inputs, outputs):
    return lambda expert_out, weights: (torch.einsum("egch,gtec->gth", expert_out, weights.to(expert_out.dtype)),)


FORWARD = {"moe_dispatch": _moe_dispatch, "moe_combine": _moe_combine}
UNSUPPORTED = {"moe_gate": "top-k gating with capacity has no single torch call; time the MoE model's gate separately"}
