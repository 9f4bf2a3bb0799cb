"""What the tracer lowers computes what the module computes: the traced graph, run op by op through the
runtime's torch forms (loom.runtime.forms) with the module's own weights and the buffers' recorded values,
gives the module's loss. Covers the top-k mixture-of-experts blocks lowered densely (Mixtral, Qwen2-MoE,
GraniteMoe), writes x[i] = v, fill_, gather with a constant index, nll_loss, list and tensor indexing, conv1d, softplus, hardswish, BatchNorm1d, average pooling whose
divisor is not the window's area, einsum with an ellipsis, Bit's weight standardization and ceil-mode max pooling of
floor size."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import HAS_HF_FX

import loom
from loom.graph_json import _DTYPES
from loom.runtime.forms import FORWARD
from loom.runtime.initial import counted_tokens

_TORCH = {name: dtype for dtype, name in _DTYPES.items()}


def _attr(value):
    if isinstance(value, dict) and "real" in value:
        return float(value["real"])
    return value


def evaluate(graph, model, inputs):
    """{tensor name: value} of every tensor of the graph, computed op by op from the model's parameters, the
    inputs and the buffers' recorded values."""
    params = dict(model.named_parameters())
    tensors = graph["tensors"]
    values = {}
    for t in tensors:
        dtype = _TORCH[t["dtype"]]
        if t["role"] == "parameter":
            values[t["id"]] = params[t["name"]].detach().view(t["shape"])  # a fused projection's [k, P, n]
        elif t["role"] == "input" and "derived" in t:  # a loss's counted tokens, from the whole labels
            values[t["id"]] = counted_tokens(inputs[tensors[t["derived"]["from"]]["name"]], t["derived"]).float()
        elif t["role"] == "input":
            values[t["id"]] = inputs[t["name"]]
        elif t["role"] == "buffer" and "updates" not in t:  # an updated buffer is computed by its ops
            flat = [float(v) for v in t["value"]]
            values[t["id"]] = torch.tensor(flat, dtype=torch.float64).to(dtype).reshape(t["shape"])
    for op in graph["ops"]:
        spec = lambda i: (tensors[i]["shape"], _TORCH[tensors[i]["dtype"]])  # noqa: E731
        form = FORWARD[op["type"]]({k: _attr(v) for k, v in op["attrs"].items()},
                                    [spec(i) for i in op["inputs"]], [spec(i) for i in op["outputs"]])
        for i, out in zip(op["outputs"], form(*[values[i] for i in op["inputs"]])):
            values[i] = out
    return {tensors[i]["name"]: v for i, v in values.items()}


def loss_of(graph, values):
    return values[graph["tensors"][graph["loss"]]["name"]].item()


def assert_computes_the_loss(graph, model, inputs, rel_tol):
    """The graph, evaluated op by op on `inputs`, gives the module's loss on them."""
    with torch.no_grad():
        want = model(**inputs).item()
    got = loss_of(graph, evaluate(graph, model, inputs))
    assert math.isclose(got, want, rel_tol=rel_tol), (got, want)


def train_mismatch(graph, loom_binary, tmp_path, name):
    """'' when one SGD step of the graph's dp 2 and tp 2 plans equals its 1-device step (coverage's --match),
    else why not."""
    from loom import coverage
    path = tmp_path / f"{name}.json"
    loom.save_graph(graph, path)
    return coverage.check_match(loom_binary, str(path), str(tmp_path), name, timeout=120)


class Writes(nn.Module):
    """XGLM's label shift (integers written into new zeros), float writes of traced rows, ProphetNet's
    gather with constant buckets and its n-gram targets (new zeros filled with -100, then written)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x, labels):
        shifted = labels.new_zeros(labels.shape)
        shifted[:, :-1] = labels[:, 1:].clone()
        shifted[:, -1] = 1
        h = self.proj(x)
        out = torch.zeros(h.shape)
        out[:, 1:3] = h[:, :2] * 2
        out[..., 0] = h[..., 5]
        buckets = torch.tensor([[0, 5, 2, 2, 1], [3, 3, 0, 4, 5]])  # ProphetNet's gather of position biases
        bias = torch.gather(h[:, 0, :], 1, buckets)  # [2 5]
        targets = labels.new_zeros(2, 2, 5).fill_(-100)  # ProphetNet's n-gram targets: filled, then written
        targets[0] = shifted
        logits = (out + h + bias.unsqueeze(-1)).flatten(0, 1)
        return F.nll_loss(F.log_softmax(torch.cat([logits, logits]), dim=-1), targets.flatten())


class Mixed(nn.Module):
    """Conv1d (Mamba's causal depthwise one), softplus, hardswish, BatchNorm1d, counted average pooling,
    list and tensor indexing, and an einsum with an ellipsis."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(6, 6, 3, padding=2, groups=6)
        self.norm = nn.BatchNorm1d(6)
        self.pool = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
        self.table = nn.Parameter(torch.randn(4, 10))
        self.register_buffer("idxs", torch.tensor([[0, 3], [9, 2]]))

    def forward(self, x, y):
        c = self.conv(x.transpose(1, 2))[..., :x.shape[1]]  # [b 6 s]
        c = F.softplus(c * 8) + F.hardswish(c)
        c = self.norm(c.transpose(1, 2).flatten(0, 1)).reshape(c.shape[0], c.shape[2], 6)
        picked = c[..., [1, 3, 4], :] + c[:, [2], :]
        bias = self.table[:, self.idxs]  # [4 2 2]
        image = self.pool(c.reshape(c.shape[0], 1, 6, -1))  # [b 1 3 ..]
        mixed = torch.einsum("...ij,...kj->...ik", picked, picked)
        return ((mixed.sum() + image.sum()) * bias.sum() - y).pow(2).mean()


@pytest.mark.parametrize(("case", "capture"), [("writes", "fx"), ("writes", "export"), ("mixed", "fx")])
def test_lowered_ops_compute_the_modules_loss(case, capture):
    torch.manual_seed(0)
    if case == "writes":
        module, inputs = Writes(), {"x": torch.randn(2, 5, 6), "labels": torch.randint(0, 6, (2, 5))}
    else:
        module, inputs = Mixed().train(), {"x": torch.randn(2, 7, 6), "y": torch.randn(())}
    graph = loom.trace(module, inputs, capture=capture)
    want = module(**inputs).item()
    got = loss_of(graph, evaluate(graph, module, inputs))
    assert math.isclose(got, want, rel_tol=1e-5), (got, want)
    if case == "writes":  # the label shift reads the batch: another batch gives its own loss
        other = {"x": torch.randn(2, 5, 6), "labels": torch.randint(0, 6, (2, 5))}
        assert math.isclose(loss_of(graph, evaluate(graph, module, other)), module(**other).item(), rel_tol=1e-5)


def test_a_write_into_a_tensor_read_before_it_is_refused():
    class ViewThenWrite(nn.Module):
        def forward(self, x):
            view = x[:, :2]
            x[:, 0] = x[:, 1] * 3  # torch's view sees this write; a functional lowering would not
            return view.sum()

    x = torch.randn(3, 4)
    with pytest.raises(loom.UnsupportedOpsError, match="setitem"):
        loom.trace(ViewThenWrite(), {"x": x}, loss=lambda out, b: out, capture="fx")
    # torch.export's functionalization makes the view read the written value, as torch does.
    graph = loom.trace(ViewThenWrite(), {"x": x}, loss=lambda out, b: out, capture="export")
    want = ViewThenWrite()(x.clone()).item()
    assert math.isclose(loss_of(graph, evaluate(graph, ViewThenWrite(), {"x": x})), want, rel_tol=1e-5)


def mixtral(experts=4, top_k=2):
    config = transformers.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=experts,
                                        num_experts_per_tok=top_k, max_position_embeddings=32)
    return transformers.MixtralForCausalLM(config)


def qwen2_moe():
    config = transformers.Qwen2MoeConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                                         moe_intermediate_size=24, shared_expert_intermediate_size=40,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         num_experts=4, num_experts_per_tok=2, max_position_embeddings=32)
    return transformers.Qwen2MoeForCausalLM(config)


def granite_moe():
    config = transformers.GraniteMoeConfig(vocab_size=64, hidden_size=32, intermediate_size=24, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                           num_experts_per_tok=2, max_position_embeddings=32)
    return transformers.GraniteMoeForCausalLM(config)


transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("build", [mixtral, qwen2_moe, granite_moe], ids=["mixtral-top2", "qwen2-moe", "granite-moe"])
def test_the_dense_lowering_computes_the_models_loss(build):
    torch.manual_seed(0)
    model = build().train()
    ids = torch.randint(0, 64, (2, 8))
    graph = loom.trace(model, {"input_ids": ids, "labels": ids})
    # The routing is in the graph, data-dependent: the fx route's dense form picks experts with argmax and where;
    # transformers 5 (the export route) is captured in its batched_mm form, each token's top-k experts' weights
    # gathered with index_select (docs/capture.md).
    routing = {"argmax", "where"} if HAS_HF_FX else {"topk", "index_select"}
    assert routing <= {op["type"] for op in graph["ops"]}
    values = evaluate(graph, model, {"input_ids": ids, "labels": ids})
    want = model(input_ids=ids, labels=ids).loss.item()
    got = values[graph["tensors"][graph["loss"]]["name"]].item()
    assert math.isclose(got, want, rel_tol=1e-5), (got, want)


def test_another_batch_routes_differently_and_still_matches():
    # The routing is computed, not baked in: the graph traced on one batch gives the model's loss on another.
    torch.manual_seed(0)
    model = mixtral(experts=3, top_k=1).train()
    ids = torch.randint(0, 64, (2, 8))
    graph = loom.trace(model, {"input_ids": ids, "labels": ids})
    other = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(5))
    values = evaluate(graph, model, {"input_ids": other, "labels": other})
    want = model(input_ids=other, labels=other).loss.item()
    assert math.isclose(values[graph["tensors"][graph["loss"]]["name"]].item(), want, rel_tol=1e-5)


class SinusoidsAndInPlaceAdd(nn.Module):
    """PegasusX's sinusoidal positions (a constant: x.type_as(traced) reads only the dtype) and an in-place
    add into a traced op's result, read afterwards (as torch would: the sum)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x, y):
        positions = torch.arange(5)[:, None]
        div = torch.exp(torch.arange(3).type_as(x) * -0.5)
        pe = torch.zeros(5, 6)
        pe[:, :3] = torch.sin(positions * div)
        pe[:, 3:] = torch.cos(positions * div)
        h = self.proj(x + pe)
        total = h * 2
        total.add_(h)
        return (total.sum(-1) - y).pow(2).mean()


def test_sinusoids_and_an_in_place_add_compute_the_modules_loss():
    torch.manual_seed(0)
    module, inputs = SinusoidsAndInPlaceAdd(), {"x": torch.randn(2, 5, 6), "y": torch.randn(2, 5)}
    graph = loom.trace(module, inputs)
    assert not any(op["type"] in ("sin", "cos") for op in graph["ops"])  # folded into a buffer
    got, want = loss_of(graph, evaluate(graph, module, inputs)), module(**inputs).item()
    assert math.isclose(got, want, rel_tol=1e-5), (got, want)


@pytest.mark.parametrize("where", ["input", "view", "constant"])
def test_an_in_place_add_that_would_reach_another_tensor_is_refused(where):
    class AddInto(nn.Module):
        def forward(self, x):
            if where == "input":
                target = x  # the caller's tensor
            elif where == "view":
                target = (x * 2)[:, :2]  # its base would change too
            else:
                target = torch.zeros(())  # a constant: the recording run's add_ already wrote into it
            target.add_(x.sum())
            return target.sum()

    x = torch.randn(3, 4)
    with pytest.raises(loom.UnsupportedOpsError, match="add_"):
        loom.trace(AddInto(), {"x": x}, loss=lambda out, b: out, capture="fx")
    # torch.export makes the graph functional: the write is a new value, and the graph computes the loss.
    graph = loom.trace(AddInto(), {"x": x}, loss=lambda out, b: out, capture="export")
    want = AddInto()(x.clone()).item()
    assert math.isclose(loss_of(graph, evaluate(graph, AddInto(), {"x": x})), want, rel_tol=1e-5)


class Pooling(nn.Module):
    """Siglip's pooling head: a learned probe attending over the tokens with nn.MultiheadAttention."""

    def __init__(self, batch_first=True):
        super().__init__()
        self.probe = nn.Parameter(torch.randn(1, 1, 8))
        self.attention = nn.MultiheadAttention(8, 2, batch_first=batch_first)

    def forward(self, x, y):
        if self.attention.batch_first:
            probe = self.probe.repeat(x.shape[0], 1, 1)  # [b 1 e]
        else:
            probe = self.probe.repeat(1, x.shape[1], 1)  # [1 b e]
        pooled = self.attention(probe, x, x)[0]
        return (pooled.sum(-1) - y).pow(2).mean()


def test_multihead_attention_lowers_to_the_modules_loss():
    torch.manual_seed(0)
    module, inputs = Pooling().eval(), {"x": torch.randn(3, 5, 8), "y": torch.randn(3, 1)}
    graph = loom.trace(module, inputs)
    assert any(op["type"] == "scaled_dot_product_attention" for op in graph["ops"])
    got, want = loss_of(graph, evaluate(graph, module, inputs)), module(**inputs).item()
    assert math.isclose(got, want, rel_tol=1e-5), (got, want)


def test_multihead_attention_in_sequence_first_layout_is_refused_by_fx_and_exported():
    torch.manual_seed(0)
    module, inputs = Pooling(batch_first=False).eval(), {"x": torch.randn(5, 3, 8), "y": torch.randn(1, 3)}
    with pytest.raises(loom.UnsupportedOpsError, match="MultiheadAttention"):
        loom.trace(module, inputs, capture="fx")
    graph = loom.trace(module, inputs)  # auto: export, at the ATen level, where fx refuses
    got, want = loss_of(graph, evaluate(graph, module, inputs)), module(**inputs).item()
    assert math.isclose(got, want, rel_tol=1e-5), (got, want)


def test_a_float64_models_loss_is_the_engines_f32_loss_cast():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4)).double().train()
    inputs = {"input": torch.randn(5, 6, dtype=torch.float64), "labels": torch.randint(0, 4, (5,))}
    graph = loom.trace(module, inputs, loss=lambda out, b: F.cross_entropy(out, b["labels"]))
    losses = [op for op in graph["ops"] if op["type"] == "cross_entropy"]
    assert [graph["tensors"][i]["dtype"] for op in losses for i in op["outputs"]] == ["f32"]
    assert graph["tensors"][graph["loss"]]["dtype"] == "f64"
    want = F.cross_entropy(module(inputs["input"]), inputs["labels"]).item()
    assert math.isclose(loss_of(graph, evaluate(graph, module, inputs)), want, rel_tol=1e-6)


class StandardizedConvNet(nn.Module):
    """Bit's weight-standardized convolution (each filter normalized as F.batch_norm of the weight with no
    running statistics: ATen's _native_batch_norm_legit.no_stats) and HGNetV2's stem pooling (a stride-1
    ceil-mode max pool after a one-pixel pad, whose output has the floor mode's size)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x, labels):
        weight = F.batch_norm(self.conv.weight.reshape(1, 8, -1), None, None, training=True, momentum=0.0,
                              eps=1e-6).reshape_as(self.conv.weight)
        h = F.conv2d(x, weight, self.conv.bias, padding=1)
        h = F.max_pool2d(F.pad(h, (0, 1, 0, 1)), kernel_size=2, stride=1, ceil_mode=True)
        return F.cross_entropy(self.head(h.mean((2, 3))), labels)


def test_standardized_weights_and_a_ceil_mode_pool_of_floor_size_train_as_one_device(loom_binary, tmp_path):
    torch.manual_seed(0)
    module, inputs = StandardizedConvNet(), {"x": torch.randn(4, 3, 6, 6), "labels": torch.randint(0, 4, (4,))}
    graph = loom.trace(module, inputs, capture="export")
    assert {"batch_norm_sums", "max_pool2d"} <= {op["type"] for op in graph["ops"]}
    assert_computes_the_loss(graph, module, inputs, rel_tol=1e-5)
    assert train_mismatch(graph, loom_binary, tmp_path, "standardized") == ""


class IntegerMaskedScores(nn.Module):
    """LongT5's local attention mask: torch.logical_and of integer masks (the attention mask is int64 ones
    and zeros), which reads each element's truth."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x, mask):
        h = self.proj(x)
        pairs = torch.logical_and(mask.unsqueeze(-1), mask.unsqueeze(-2))  # [b s s] of int64 masks
        scores = (h @ h.transpose(1, 2)).masked_fill(~pairs, -1e4)
        return scores.softmax(-1).sum(1).pow(2).mean()


def test_logical_and_of_integer_masks_computes_the_modules_loss():
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1]])
    module, inputs = IntegerMaskedScores(), {"x": torch.randn(2, 4, 6), "mask": mask}
    graph = loom.trace(module, inputs, capture="export")
    assert_computes_the_loss(graph, module, inputs, rel_tol=1e-5)

