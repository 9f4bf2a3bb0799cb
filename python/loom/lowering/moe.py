"""Dense lowering of top-k mixture-of-experts blocks (Mixtral, OLMoE, Qwen2-MoE)."""

import torch
import torch.nn as nn

from .base import Meta, _is_tensor


# ------------------------------------------------------------------------------------------------
# Top-k mixture-of-experts blocks (Mixtral, OLMoE, Qwen2-MoE). HuggingFace routes tokens with
# torch.where over the expert mask: sizes that depend on the data, which no static graph holds. The block
# is traced whole (a leaf, capture.py) and lowered densely: the top-k selection as argmax rounds, each one
# masking its winner; a gate matrix [tokens, experts] holding each token's routing weight at its selected
# experts and 0 elsewhere; every expert on every token, weighted by its gate column, summed in expert order.
# The result is HuggingFace's (a token's terms are added in the same order; an unselected expert adds an
# exact 0), routing keeps its data dependence, and the gradient reaches the selected weights as through
# torch.topk. The cost: each expert computes all tokens, not only its own. Ties between routing weights
# resolve to the lower expert index (torch.topk's order for exact ties is not specified).

_DENSE_MOE = {"MixtralSparseMoeBlock", "OlmoeSparseMoeBlock", "Qwen2MoeSparseMoeBlock"}


def is_dense_moe(module):
    return type(module).__name__ in _DENSE_MOE and type(module).__module__.startswith("transformers.")


def _gated_mlp(cx, mlp, x, rows, tag):
    """An expert: Mixtral's w2(act(w1 x) * w3 x) or the MLP down(act(gate x) * up x); act must be SiLU."""
    names = ("w1", "w3", "w2") if hasattr(mlp, "w1") else ("gate_proj", "up_proj", "down_proj")
    gate, up, down = (getattr(mlp, n) for n in names)
    if not isinstance(getattr(mlp, "act_fn", None), nn.SiLU) or any(lin.bias is not None for lin in (gate, up, down)):
        return None
    dtype = cx.torch_dtype(x)
    inner = Meta([rows, gate.out_features], dtype)
    g = cx.emit("linear", [x, cx.tensor(gate.weight)], {}, inner, suffix=f"{tag}.gate")
    u = cx.emit("linear", [x, cx.tensor(up.weight)], {}, inner, suffix=f"{tag}.up")
    h = cx.emit("mul", [cx.emit("silu", [g], {}, inner, suffix=f"{tag}.act"), u], {}, inner, suffix=f"{tag}.gated")
    return cx.emit("linear", [h, cx.tensor(down.weight)], {}, Meta([rows, down.out_features], dtype),
                   suffix=f"{tag}.down")


def _dense_moe(cx, m, args, kwargs, value):
    x = args[0]
    if not _is_tensor(x) or cx.rank(x) != 3 or (m.training and getattr(m, "jitter_noise", 0)):
        return None
    out_value, logits_value = value
    b, s, h = cx.shape(x)
    rows, experts, dtype = b * s, m.num_experts, cx.torch_dtype(x)
    if m.gate.bias is not None or dtype != torch.float32:
        return None
    flat = cx.emit("reshape", [x], {"shape": [rows, h]}, Meta([rows, h], dtype), suffix="tokens")
    logits = cx.emit("linear", [flat, cx.tensor(m.gate.weight)], {}, logits_value, suffix="router_logits")
    table = Meta([rows, experts], dtype)
    probs = cx.emit("softmax", [logits], {"dim": 1}, table, suffix="routing")
    every = cx.constant(torch.arange(experts))
    masked = probs
    for k in range(m.top_k):
        best = cx.emit("argmax", [masked], {"dim": 1}, Meta([rows], torch.int64), suffix=f"top{k}")
        column = cx.emit("unsqueeze", [best], {"dim": 1}, Meta([rows, 1], torch.int64), suffix=f"top{k}.column")
        hot = cx.emit("eq", [column, every], {}, Meta([rows, experts], torch.bool), suffix=f"top{k}.hot")
        masked = cx.emit("masked_fill", [masked, hot], {"value": float("-inf")}, table, suffix=f"top{k}.taken")
    taken = cx.emit("eq", [masked, cx.constant(torch.tensor(float("-inf")))], {}, Meta([rows, experts], torch.bool),
                    suffix="selected")
    gates = cx.emit("where", [taken, probs, cx.constant(torch.tensor(0.0))], {}, table, suffix="gates")
    if getattr(m, "norm_topk_prob", True):  # Mixtral always renormalizes the top-k weights
        total = cx.emit("sum", [gates], {"dims": [1], "keepdim": True}, Meta([rows, 1], dtype), suffix="gates.sum")
        gates = cx.emit("div", [gates, total], {}, table, suffix="gates.normalized")
    out = None
    for e, expert in enumerate(m.experts):
        y = _gated_mlp(cx, expert, flat, rows, f"experts.{e}")
        if y is None:
            return None
        weight = cx.emit("slice", [gates], {"dim": 1, "start": e, "end": e + 1}, Meta([rows, 1], dtype),
                         suffix=f"experts.{e}.gate")
        term = cx.emit("mul", [y, weight], {}, Meta([rows, h], dtype), suffix=f"experts.{e}.weighted")
        if out is not None:
            term = cx.emit("add", [out, term], {}, Meta([rows, h], dtype), suffix=f"experts.{e}.sum")
        out = term
    if hasattr(m, "shared_expert"):  # Qwen2-MoE: an always-on expert, gated by a sigmoid
        shared = _gated_mlp(cx, m.shared_expert, flat, rows, "shared_expert")
        if shared is None or m.shared_expert_gate.bias is not None:
            return None
        score = cx.emit("linear", [flat, cx.tensor(m.shared_expert_gate.weight)], {}, Meta([rows, 1], dtype),
                        suffix="shared_expert_gate")
        score = cx.emit("sigmoid", [score], {}, Meta([rows, 1], dtype), suffix="shared_expert_gate.sigmoid")
        shared = cx.emit("mul", [score, shared], {}, Meta([rows, h], dtype), suffix="shared_expert.weighted")
        out = cx.emit("add", [out, shared], {}, Meta([rows, h], dtype), suffix="shared_expert.sum")
    return cx.emit("reshape", [out], {"shape": [b, s, h]}, out_value), logits
