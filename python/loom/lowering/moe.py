"""Dense lowering of top-k mixture-of-experts blocks (Mixtral, OLMoE, Qwen2-MoE, GraniteMoe)."""

import torch
import torch.nn as nn

from .base import Meta, _is_tensor


# ------------------------------------------------------------------------------------------------
# Top-k mixture-of-experts blocks (Mixtral, OLMoE, Qwen2-MoE; GraniteMoe below). HuggingFace routes tokens with
# torch.where over the expert mask: sizes that depend on the data, which no static graph holds. The block
# is traced whole (a leaf, capture.py) and lowered densely: the top-k selection as argmax rounds, each one
# masking its winner; a gate matrix [tokens, experts] holding each token's routing weight at its selected
# experts and 0 elsewhere; every expert on every token, weighted by its gate column, summed in expert order.
# The result is HuggingFace's (a token's terms are added in the same order; an unselected expert adds an
# exact 0), routing keeps its data dependence, and the gradient reaches the selected weights as through
# torch.topk. The cost: each expert computes all tokens, not only its own. Ties between routing weights
# resolve to the lower expert index (torch.topk's order for exact ties is not specified).

_DENSE_MOE = {"MixtralSparseMoeBlock", "OlmoeSparseMoeBlock", "Qwen2MoeSparseMoeBlock"}
# GraniteMoe's block: its experts are one parameter [experts, out, in] per projection (ParallelExperts), its
# gate the softmax of the top-k logits; tokens sorted by expert, run, and added back with index_add.
_PARALLEL_EXPERTS_MOE = {"GraniteMoeMoE"}


def is_dense_moe(module):
    return type(module).__name__ in _DENSE_MOE | _PARALLEL_EXPERTS_MOE and \
        type(module).__module__.startswith("transformers.")


def moe_handler(module):
    """The dense lowering of a mixture-of-experts block (is_dense_moe)."""
    return _parallel_experts_moe if type(module).__name__ in _PARALLEL_EXPERTS_MOE else _dense_moe


def _top_k_taken(cx, scores, k, rows, experts):
    """[rows, experts] bool: each row's k largest scores, as k argmax rounds each masking its winner (ties to
    the lower expert, as torch.topk's order for exact ties is not specified)."""
    table = Meta([rows, experts], cx.torch_dtype(scores))
    every = cx.constant(torch.arange(experts))
    masked = scores
    for r in range(k):
        best = cx.emit("argmax", [masked], {"dim": 1}, Meta([rows], torch.int64), suffix=f"top{r}")
        column = cx.emit("unsqueeze", [best], {"dim": 1}, Meta([rows, 1], torch.int64), suffix=f"top{r}.column")
        hot = cx.emit("eq", [column, every], {}, Meta([rows, experts], torch.bool), suffix=f"top{r}.hot")
        masked = cx.emit("masked_fill", [masked, hot], {"value": float("-inf")}, table, suffix=f"top{r}.taken")
    return cx.emit("eq", [masked, cx.constant(torch.tensor(float("-inf")))], {}, Meta([rows, experts], torch.bool),
                   suffix="selected")


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
    taken = _top_k_taken(cx, probs, m.top_k, rows, experts)
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


def _parallel_experts_moe(cx, m, args, kwargs, value):
    """GraniteMoe: gates = softmax over each token's top-k router logits (a softmax of the logits with the others
    at -inf: the same k weights), every expert on every token, act(x W_in[e]_1) * (x W_in[e]_2) W_out[e] weighted
    by its gate, summed in expert order (index_add adds a token's terms in that order). SiLU experts only."""
    x = args[0]
    if not _is_tensor(x) or cx.rank(x) != 3 or not isinstance(m.activation, nn.SiLU):
        return None
    out_value, logits_value = value
    b, s, h = cx.shape(x)
    rows, experts, dtype = b * s, m.router.num_experts, cx.torch_dtype(x)
    if dtype != torch.float32 or m.router.layer.bias is not None:
        return None
    flat = cx.emit("reshape", [x], {"shape": [rows, h]}, Meta([rows, h], dtype), suffix="tokens")
    logits = cx.emit("linear", [flat, cx.tensor(m.router.layer.weight)], {}, logits_value, suffix="router_logits")
    table = Meta([rows, experts], dtype)
    taken = _top_k_taken(cx, logits, m.router.top_k, rows, experts)
    kept = cx.emit("where", [taken, logits, cx.constant(torch.tensor(float("-inf")))], {}, table, suffix="top_k_logits")
    gates = cx.emit("softmax", [kept], {"dim": 1}, table, suffix="gates")
    w_in, w_out = cx.tensor(m.input_linear.weight), cx.tensor(m.output_linear.weight)
    inner = m.output_linear.input_size
    out = None
    for e in range(experts):
        tag = f"experts.{e}"
        up = cx.emit("slice", [w_in], {"dim": 0, "start": e, "end": e + 1}, Meta([1, 2 * inner, h], dtype),
                     suffix=f"{tag}.input_weight")
        up = cx.emit("reshape", [up], {"shape": [2 * inner, h]}, Meta([2 * inner, h], dtype), suffix=f"{tag}.input_w")
        down = cx.emit("slice", [w_out], {"dim": 0, "start": e, "end": e + 1}, Meta([1, h, inner], dtype),
                       suffix=f"{tag}.output_weight")
        down = cx.emit("reshape", [down], {"shape": [h, inner]}, Meta([h, inner], dtype), suffix=f"{tag}.output_w")
        both = cx.emit("linear", [flat, up], {}, Meta([rows, 2 * inner], dtype), suffix=f"{tag}.input_linear")
        half = Meta([rows, inner], dtype)
        gate, lin = cx.emit_many("split", [both], {"sizes": [inner, inner], "dim": 1}, [half, half],
                                 suffix=f"{tag}.chunk")
        act = cx.emit("mul", [cx.emit("silu", [gate], {}, half, suffix=f"{tag}.act"), lin], {}, half,
                      suffix=f"{tag}.gated")
        y = cx.emit("linear", [act, down], {}, Meta([rows, h], dtype), suffix=f"{tag}.output_linear")
        weight = cx.emit("slice", [gates], {"dim": 1, "start": e, "end": e + 1}, Meta([rows, 1], dtype),
                         suffix=f"{tag}.gate")
        term = cx.emit("mul", [y, weight], {}, Meta([rows, h], dtype), suffix=f"{tag}.weighted")
        out = term if out is None else cx.emit("add", [out, term], {}, Meta([rows, h], dtype), suffix=f"{tag}.sum")
    return cx.emit("reshape", [out], {"shape": [b, s, h]}, out_value), logits
