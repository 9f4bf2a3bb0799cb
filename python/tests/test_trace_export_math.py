"""The ATen ops of transformers 5 models that the export route (capture="export") spells with registry ops or
maps onto new ones: reciprocal and acos (registry ops, src/ops/elementwise.cc), remainder by a number (a
registry op: CANINE's hashed ids), linalg_vector_norm (sqrt of a sum of squares, a sum of magnitudes, their
maximum), index_put under a boolean mask (where: Gemma 3's `ids[image_mask] = 0`), and attention with a
computed mask (boolean, with is_causal, with grouped key-value heads), spelled out. Each graph computes the
module's loss op by op with the runtime's forms; one SGD step of dp 2 and tp 2 plans equals the 1-device
step; each new registry op's runtime form and its backward equal torch's."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_trace_lowered_values import assert_computes_the_loss, evaluate, loss_of, train_mismatch

import loom
from loom import coverage
from loom.runtime import forms


class HashedNormedAttention(nn.Module):
    """CANINE-like hashed embeddings (remainder), an id mask written in place (index_put), YOSO-like angles
    between normalised rows (vector norm, acos), a reciprocal, and attention with a key-padding mask computed
    from the ids, causal and with 2 key-value heads for 4 query heads."""

    def __init__(self, buckets=13, hidden=16, heads=4, kv_heads=2, classes=5):
        super().__init__()
        self.buckets, self.heads, self.kv_heads = buckets, heads, kv_heads
        self.embed = nn.Embedding(buckets, hidden)
        self.q = nn.Linear(hidden, hidden)
        self.kv = nn.Linear(hidden, 2 * hidden * kv_heads // heads)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids, labels):
        b, s = ids.shape
        ids = ids.clone()
        ids[ids == 3] = 0  # index_put under a boolean mask
        x = self.embed(((ids + 1) * 7) % self.buckets)  # remainder by a number
        unit = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        angles = torch.acos(torch.clamp((unit[:, :1] * unit).sum(-1), -0.99, 0.99))  # [b s]
        inv = torch.reciprocal(1.0 + torch.linalg.vector_norm(x, ord=1, dim=(1, 2)))  # [b]
        d = x.shape[-1] // self.heads
        q = self.q(x).view(b, s, self.heads, d).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, self.kv_heads, d).permute(2, 0, 3, 1, 4)
        keep = (ids != 0)[:, None, None, :] | torch.eye(s, dtype=torch.bool)  # every row keeps a key
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=True, enable_gqa=True)
        h = out.transpose(1, 2).reshape(b, s, -1) * (angles[..., None] + inv[:, None, None])
        top = torch.linalg.vector_norm(h, ord=math.inf, dim=-1).sum()
        return F.cross_entropy(self.head(h).reshape(b * s, -1), labels.reshape(-1)) + 1e-3 * top


def _batch(seed):
    g = torch.Generator().manual_seed(seed)
    return {"ids": torch.randint(0, 50, (4, 6), generator=g), "labels": torch.randint(0, 5, (4, 6), generator=g)}


@pytest.fixture(scope="module")
def traced():
    torch.manual_seed(0)
    model = HashedNormedAttention()
    batch = _batch(0)
    batch["ids"][0, 2] = 3  # the written mask picks something
    return model, loom.trace(model, batch, capture="export", loss=lambda out, batch: out), batch


def test_the_ops_map_onto_the_registry(traced):
    _, graph, _ = traced
    types = [op["type"] for op in graph["ops"]]
    assert {"remainder", "acos", "reciprocal", "sqrt", "amax", "where"} <= set(types)
    assert "scaled_dot_product_attention" not in types  # a computed mask: spelled out with softmax
    remainder = next(op for op in graph["ops"] if op["type"] == "remainder")
    assert graph["tensors"][remainder["outputs"][0]]["dtype"] == "i64"


def test_the_graph_computes_the_modules_loss(traced):
    model, graph, batch = traced
    for inputs in (batch, _batch(1)):  # masks and hashes traced, not folded: another batch is its own
        assert_computes_the_loss(graph, model, inputs, rel_tol=1e-5)


def test_dp_and_tp_steps_equal_the_one_device_step(traced, loom_binary, tmp_path):
    _, graph, _ = traced
    assert train_mismatch(graph, loom_binary, tmp_path, "math") == ""


def _form(op_type, attrs, x):
    spec = [(tuple(x.shape), x.dtype)]
    return forms.build(op_type, attrs, spec, spec)


@pytest.mark.parametrize("op_type,reference,low,high", [
    ("reciprocal", torch.reciprocal, 0.3, 3.0), ("acos", torch.acos, -0.95, 0.95)])
def test_unary_forms_and_gradients_equal_torchs(op_type, reference, low, high):
    g = torch.Generator().manual_seed(5)
    x = (torch.rand(3, 7, generator=g, dtype=torch.float64) * (high - low) + low).requires_grad_()
    y = _form(op_type, {}, x)(x)[0]
    assert torch.equal(y, reference(x))
    grad = torch.randn(3, 7, generator=g, dtype=torch.float64)
    want, = torch.autograd.grad(reference(x), x, grad)
    if op_type in forms.FROM_OUTPUT:  # the runtime's closed form from the output alone
        got = forms.FROM_OUTPUT[op_type]({}, y.detach(), grad)
    else:  # autograd over the form
        got, = torch.autograd.grad(y, x, grad)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_remainder_form_takes_the_divisors_sign_and_keeps_integers():
    ids = torch.tensor([[7, -7, 10, -1]])
    got = _form("remainder", {"divisor": 5.0}, ids)(ids)[0]
    assert got.dtype == torch.int64 and torch.equal(got, torch.remainder(ids, 5))
    x = torch.tensor([7.5, -7.5, 0.25], dtype=torch.float64)
    assert torch.equal(_form("remainder", {"divisor": -2.0}, x)(x)[0], torch.remainder(x, -2.0))


class ConvStack(nn.Module):
    """MobileNet- and PoolFormer-like layers: training-mode batch norm (its running statistics updated by the
    step), ReLU6 (hardtanh), group norm, bilinear and nearest resizing."""

    def __init__(self, classes=5):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.gn = nn.GroupNorm(2, 8)
        self.head = nn.Linear(8, classes)

    def forward(self, x, labels):
        h = F.relu6(self.bn(self.conv(x)) * 4)
        h = self.gn(h)
        h = F.interpolate(h, scale_factor=2, mode="bilinear") + F.interpolate(h, scale_factor=2, mode="nearest")
        return F.cross_entropy(self.head(h.mean(dim=(2, 3))), labels)


def test_batch_norm_group_norm_relu6_and_resizing_compute_the_modules_loss_and_update_the_statistics(
        loom_binary, tmp_path):
    torch.manual_seed(0)
    model = ConvStack().train()
    g = torch.Generator().manual_seed(3)
    batch = {"x": torch.randn(8, 3, 6, 6, generator=g), "labels": torch.randint(0, 5, (8,), generator=g)}
    graph = loom.trace(model, batch, capture="export")
    types = [op["type"] for op in graph["ops"]]
    assert {"batch_norm_from_sums", "clamp", "group_norm", "upsample_bilinear2d", "upsample_nearest2d"} <= set(types)
    updated = {t["name"] for t in graph["tensors"] if t["name"].endswith(".updated")}
    assert any("running_mean" in n for n in updated) and any("running_var" in n for n in updated)
    with torch.no_grad():
        want = model(**batch).item()
    assert math.isclose(loss_of(graph, evaluate(graph, model, batch)), want, rel_tol=1e-5)
    assert train_mismatch(graph, loom_binary, tmp_path, "conv") == ""


def test_in_place_dropout_draws_its_mask_with_the_dropout_op():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.25, inplace=True), nn.Linear(4, 1))
    graph = loom.trace(model, {"input": torch.randn(3, 4)}, loss=lambda out, batch: out.sum(), capture="export")
    dropout = next(op for op in graph["ops"] if op["type"] == "dropout")
    p = dropout["attrs"]["p"]
    assert math.isclose(p["real"] if isinstance(p, dict) else p, 0.25)
    kept = next(op for op in graph["ops"] if op["type"] == "scale" and op["inputs"] == dropout["outputs"])
    factor = kept["attrs"]["factor"]
    assert math.isclose(factor["real"] if isinstance(factor, dict) else factor, 0.75)  # 0 or 1: bernoulli(0.75)


class ComplexRotary(nn.Module):
    """DeepSeek-V2's and Llama 4's rotary embedding: pairs viewed as complex numbers times constant unit ones."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        s = x.shape[1]
        angles = torch.outer(torch.arange(s, dtype=torch.float32), 1.0 / 10000 ** (torch.arange(0, 8, 2) / 8))
        freqs = torch.polar(torch.ones_like(angles), angles)  # [s, 4] complex, a constant
        h = torch.view_as_complex(self.proj(x).float().reshape(*x.shape[:-1], -1, 2))
        return (torch.view_as_real(h * freqs).flatten(2) ** 2).sum()


def test_complex_rotary_is_lowered_with_real_pairs():
    torch.manual_seed(0)
    model, inputs = ComplexRotary(), {"x": torch.randn(2, 5, 8)}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export")
    assert all(t["dtype"] == "f32" for t in graph["tensors"] if t["role"] != "input")
    assert math.isclose(loss_of(graph, evaluate(graph, model, inputs)), model(**inputs).item(), rel_tol=1e-5)


class Fourier(nn.Module):
    """FNet's mixing: the real part of a 2-D Fourier transform over tokens and features (c2c after a cast, as
    transformers' FNet writes it, and r2c as torch.fft.fft of a real tensor writes it), and an orthonormal one."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x):
        h = self.proj(x)
        a = torch.fft.fftn(h.to(torch.complex64), dim=(1, 2)).real
        b = torch.fft.fft(torch.fft.fft(h, dim=-1), dim=-2).real
        c = torch.fft.fft(h, dim=1, norm="ortho").imag
        return (a * b).mean() + (c ** 2).sum()


def test_fourier_transforms_are_einsums_with_cosines_and_sines():
    torch.manual_seed(0)
    model, inputs = Fourier(), {"x": torch.randn(2, 5, 6)}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export")
    assert "einsum" in {op["type"] for op in graph["ops"]}
    assert math.isclose(loss_of(graph, evaluate(graph, model, inputs)), model(**inputs).item(), rel_tol=1e-5)


def test_integer_clamp_and_scale_forms_keep_integers():
    """A question-answering span's positions are clamped to [0, tokens] (float bounds in the graph): the
    loss's targets must stay integers, as torch's clamp of an integer tensor by integers keeps them."""
    positions = torch.tensor([-3, 4, 20])
    got = _form("clamp", {"min": 0.0, "max": 16.0}, positions)(positions)[0]
    assert got.dtype == torch.int64 and got.tolist() == [0, 4, 16]
    assert _form("scale", {"factor": 7.0}, positions)(positions)[0].dtype == torch.int64
    x = torch.tensor([-0.5, 3.5])
    assert torch.equal(_form("clamp", {"min": 0.25}, x)(x)[0], torch.tensor([0.25, 3.5]))
    # an infinite bound written as text (JSON has no infinities: Nemotron's clamp(max=inf)) is no bound
    assert torch.equal(_form("clamp", {"min": -1.0, "max": "inf"}, x)(x)[0], x)


class PromotedScale(nn.Module):
    """BigBird's `mask * 1e6` of an integer mask: torch promotes to float before scaling."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, ids):
        return (self.proj(x) - (ids > 2).long().unsqueeze(-1) * 0.5).sum()


def test_an_integer_tensor_times_a_float_is_cast_first(loom_binary, tmp_path):
    torch.manual_seed(0)
    model, inputs = PromotedScale(), {"x": torch.randn(4, 4), "ids": torch.tensor([1, 3, 5, 2])}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export")
    scale = next(op for op in graph["ops"] if op["type"] == "scale")
    assert graph["tensors"][scale["inputs"][0]]["dtype"] == "f32"
    assert math.isclose(loss_of(graph, evaluate(graph, model, inputs)), model(**inputs).item(), rel_tol=1e-6)
    loom.save_graph(graph, tmp_path / "g.json")
    assert coverage._plan(loom_binary, str(tmp_path / "g.json"), coverage.PLANS["dp"], str(tmp_path / "out"),
                          120).returncode == 0


class BroadcastBatchMatmul(nn.Module):
    """DeepSeek V3.2's indexer: per-head queries [b s h d] times one key per batch [b 1 d t]."""

    def __init__(self):
        super().__init__()
        self.q, self.k = nn.Linear(4, 8), nn.Linear(4, 4)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 2, 4)
        k = self.k(x).transpose(1, 2).unsqueeze(1)  # [b 1 4 s]
        return (q @ k).relu().sum()


def test_broadcast_batch_dims_of_a_matmul_are_expanded(loom_binary, tmp_path):
    torch.manual_seed(0)
    model, inputs = BroadcastBatchMatmul(), {"x": torch.randn(2, 3, 4)}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export")
    assert "expand" in {op["type"] for op in graph["ops"]}
    assert math.isclose(loss_of(graph, evaluate(graph, model, inputs)), model(**inputs).item(), rel_tol=1e-5)
    loom.save_graph(graph, tmp_path / "g.json")
    assert coverage._plan(loom_binary, str(tmp_path / "g.json"), coverage.PLANS["dp"], str(tmp_path / "out"),
                          120).returncode == 0


class ShiftVarMask(nn.Module):
    """RWKV's time shift (a pad of one step in front, one cropped at the end), xLSTM's variance (Bessel's and
    the plain one) and CpmAnt's mask (a boolean mask & a constant int32 0/1 mask)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, ids):
        h = self.proj(x)  # [b s d]
        shifted = F.pad(h, (0, 0, 1, -1))
        spread = h.var(-1, keepdim=True) + torch.var(h, dim=(0, 2), correction=0)[None, :, None]
        allowed = torch.tril(torch.ones(ids.shape[1], ids.shape[1], dtype=torch.int32))
        both = ((ids > 2)[:, None, :] & allowed).to(h.dtype)  # [b s s] int32 -> float
        return ((shifted * spread) @ h.transpose(1, 2) * both).sum()


def test_negative_pads_variance_and_an_integer_mask_compute_the_modules_loss(loom_binary, tmp_path):
    torch.manual_seed(0)
    model, inputs = ShiftVarMask(), {"x": torch.randn(2, 5, 4), "ids": torch.tensor([[1, 3, 5, 2, 4], [4, 4, 0, 1, 9]])}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export", batch_dim=None)
    assert {"pad", "scale", "where"} <= {op["type"] for op in graph["ops"]}
    assert math.isclose(loss_of(graph, evaluate(graph, model, inputs)), model(**inputs).item(), rel_tol=1e-5)
    assert train_mismatch(graph, loom_binary, tmp_path, "shift") == ""


class Sinusoids(nn.Module):
    """PegasusX's positions: sin and cos of constant positions cast with `type_as` the embeddings (a traced
    tensor whose dtype alone is read), written into a table."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 6)

    def forward(self, ids):
        x = self.embed(ids)
        positions = torch.arange(ids.shape[1])[:, None]
        rates = torch.exp(torch.arange(3).type_as(x) * -0.5)
        table = torch.zeros(ids.shape[1], 6)
        table[:, :3], table[:, 3:] = torch.sin(positions * rates), torch.cos(positions * rates)
        return ((x + table) ** 2).sum()


def test_sinusoids_of_constant_positions_are_folded():
    torch.manual_seed(0)
    model, inputs = Sinusoids(), {"ids": torch.randint(0, 10, (2, 5))}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export", batch_dim=None)
    assert not {"sin", "cos"} & {op["type"] for op in graph["ops"]}
    assert_computes_the_loss(graph, model, inputs, rel_tol=1e-6)


def test_batch_norm_in_float64_updates_its_running_statistics_in_float64(loom_binary, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).train().double()
    inputs = {"input": torch.randn(4, 3, 6, 6, dtype=torch.float64)}
    graph = loom.trace(model, inputs, loss=lambda out, batch: (out ** 2).sum(), capture="export", batch_dim=None)
    values = evaluate(graph, model, inputs)
    model(**inputs)  # torch's step updates the running statistics
    for name in ("running_mean", "running_var"):
        got = values[f"1.{name}.updated"]
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, getattr(model[1], name), rtol=1e-9, atol=1e-12)
    assert train_mismatch(graph, loom_binary, tmp_path, "bn64") == ""
