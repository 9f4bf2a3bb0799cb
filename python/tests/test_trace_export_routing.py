"""The ATen ops of transformers 5's mixture-of-experts routing, state-space layers and masks, captured by the
export route (capture="export"): topk (the registry's topk, src/ops/routing.cc), a parameter indexed by traced
expert ids and rows picked by (arange, traced position) pairs (index_select), log1p (log of 1 + x), a depthwise
1-D convolution (conv2d of unit height), max with positions, boolean ~ and &, expm1, scattered masks, scores
scattered from a top-k (Llama 4), a matrix times a batch of matrices (an einsum). Each graph computes the module's loss op by op with the runtime's forms;
one SGD step of the routing model's dp 2 and tp 2 plans equals the 1-device step (topk's sharding rule: rows
split, the ranked dim whole)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_trace_lowered_values import assert_computes_the_loss, evaluate, loss_of, train_mismatch

import loom
from loom import coverage


class BatchedExperts(nn.Module):
    """A top-2 router over 4 experts, each token's experts' weights gathered by id and applied by bmm (the
    `batched_mm` experts of transformers 5), a softplus written with log1p, and a causal depthwise conv."""

    def __init__(self, hidden=8, experts=4, inner=6, classes=5):
        super().__init__()
        self.router = nn.Linear(hidden, experts, bias=False)
        self.up = nn.Parameter(torch.randn(experts, inner, hidden) * 0.3)
        self.down = nn.Parameter(torch.randn(experts, hidden, inner) * 0.3)
        self.conv = nn.Conv1d(hidden, hidden, 3, groups=hidden, padding=2)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x, labels):
        b, s, h = x.shape
        tokens = x.reshape(b * s, h)
        weights, ids = torch.topk(torch.softmax(self.router(tokens), dim=-1), 2, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        picked = tokens.repeat_interleave(2, dim=0)
        ids = ids.reshape(-1)
        inner = torch.bmm(self.up[ids], picked.unsqueeze(-1)).squeeze(-1)
        inner = torch.log1p(torch.exp(inner))  # softplus through log1p
        out = torch.bmm(self.down[ids], inner.unsqueeze(-1)).squeeze(-1) * weights.reshape(-1, 1)
        mixed = out.view(b * s, 2, h).sum(dim=1).view(b, s, h)
        conv = self.conv(mixed.transpose(1, 2))[..., :s].transpose(1, 2)
        logits = self.head(conv + x)
        last = labels.argmax(dim=-1)  # a traced position per row, read as a classifier reads its last token
        pooled = logits[torch.arange(b), last]
        return F.cross_entropy(logits.reshape(b * s, -1), labels.reshape(-1)) + F.cross_entropy(pooled, labels[:, 0])


def _batch(seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(4, 6, 8, generator=g), "labels": torch.randint(0, 5, (4, 6), generator=g)}


@pytest.fixture(scope="module")
def traced():
    torch.manual_seed(0)
    model = BatchedExperts()
    return model, loom.trace(model, _batch(0), capture="export", loss=lambda out, batch: out)


def test_the_routing_ops_map_onto_the_registry(traced):
    _, graph = traced
    types = [op["type"] for op in graph["ops"]]
    assert types.count("topk") == 1 and types.count("index_select") == 3  # 2 expert weights, the pooled row
    assert "log" in types and "conv2d" in types
    topk = next(op for op in graph["ops"] if op["type"] == "topk")
    assert topk["attrs"]["k"] == {"int": 2} or topk["attrs"]["k"] == 2
    dtypes = [graph["tensors"][i]["dtype"] for i in topk["outputs"]]
    assert dtypes == ["f32", "i64"]


def test_the_graph_computes_the_modules_loss(traced):
    model, graph = traced
    for seed in (0, 1):  # the routing is traced, not folded: another batch routes its own tokens
        batch = _batch(seed)
        with torch.no_grad():
            want = model(**batch).item()
        assert math.isclose(loss_of(graph, evaluate(graph, model, batch)), want, rel_tol=1e-5)


def test_dp_and_tp_steps_equal_the_one_device_step(traced, loom_binary, tmp_path):
    _, graph = traced
    path = tmp_path / "experts.json"
    loom.save_graph(graph, path)
    assert coverage.check_match(loom_binary, str(path), str(tmp_path), "experts", timeout=120) == ""


class MaskedExtremes(nn.Module):
    """max over a dim with its positions, a negated and and-ed boolean mask, expm1 (Apertus's activation)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        h = self.proj(x)
        values, positions = h.max(dim=-1)
        keep = ~(h > 0.1) & (h < 0.5)
        return (torch.expm1(h) * keep).sum() + values.sum() + positions.float().sum()


def test_max_with_positions_boolean_masks_and_expm1_compute_the_modules_loss():
    torch.manual_seed(0)
    model, inputs = MaskedExtremes(), {"x": torch.randn(3, 4)}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export")
    assert {"amax", "argmax", "exp"} <= {op["type"] for op in graph["ops"]}
    assert math.isclose(loss_of(graph, evaluate(graph, model, inputs)), model(**inputs).item(), rel_tol=1e-6)


class GroupMask(nn.Module):
    """A group-limited router's mask (DeepSeek V3, GLM-4 MoE): ones scattered at the top groups, along the last
    dim and along the first."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 6)

    def forward(self, x):
        h = self.proj(x)  # [3 6]
        rows = torch.zeros_like(h).scatter_(1, torch.topk(h, 2, dim=-1)[1], 1)
        columns = torch.zeros_like(h).scatter(0, torch.topk(h, 2, dim=0)[1], 1.0)
        return (h * rows).sum() + (h.masked_fill(~columns.bool(), 0.0) ** 2).sum()


def test_scattered_masks_compute_the_modules_loss():
    torch.manual_seed(0)
    model, inputs = GroupMask(), {"x": torch.randn(3, 4)}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export")
    assert [op["type"] for op in graph["ops"]].count("topk") == 2
    assert math.isclose(loss_of(graph, evaluate(graph, model, inputs)), model(**inputs).item(), rel_tol=1e-6)


class ScatteredScores(nn.Module):
    """Llama 4's router: the top-2 scores scattered into a row of -inf (scatter of a source), then a softmax."""

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(4, 6)

    def forward(self, x):
        logits = self.router(x)
        top, ids = torch.topk(logits, 2, dim=1)
        scores = torch.full_like(logits, float("-inf")).scatter_(1, ids, top)
        return (torch.softmax(scores, -1) ** 2).sum() + scores.clamp(min=-5).sum()


def test_scattered_scores_compute_the_modules_loss_and_train_alike(loom_binary, tmp_path):
    torch.manual_seed(0)
    model, inputs = ScatteredScores(), {"x": torch.randn(6, 4)}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export", batch_dim=None)
    assert [op["type"] for op in graph["ops"]].count("eq") == 2  # one per top-k position
    assert_computes_the_loss(graph, model, inputs, rel_tol=1e-6)
    assert train_mismatch(graph, loom_binary, tmp_path, "scores") == ""


class MatrixTimesBatch(nn.Module):
    """Mamba's projection: a weight [m k] times a batch [b k n] (and a batch times a matrix)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 4))

    def forward(self, x):
        return ((self.weight @ x) ** 2).sum() + ((x.transpose(1, 2) @ self.weight.t()) ** 2).sum()


def test_a_matrix_times_a_batch_is_an_einsum_that_plans(loom_binary, tmp_path):
    torch.manual_seed(0)
    model, inputs = MatrixTimesBatch(), {"x": torch.randn(4, 4, 6)}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export")
    assert [op["attrs"]["equation"] for op in graph["ops"] if op["type"] == "einsum"] == ["mk,pkn->pmn", "pmk,kn->pmn"]
    assert math.isclose(loss_of(graph, evaluate(graph, model, inputs)), model(**inputs).item(), rel_tol=1e-5)
    loom.save_graph(graph, tmp_path / "g.json")
    assert coverage._plan(loom_binary, str(tmp_path / "g.json"), coverage.PLANS["tp"], str(tmp_path / "out"),
                          120).returncode == 0
