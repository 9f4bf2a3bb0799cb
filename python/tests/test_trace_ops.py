"""Tracing comparisons, cumsum, index_select, pad, interpolate and shape-only fills, and the engine
resolving and planning what they lower to."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import loom


class RobertaPositions(nn.Module):
    """RoBERTa's position ids from the padding mask (create_position_ids_from_input_ids), then embeddings."""

    def __init__(self, vocab=50, hidden=16, padding_idx=1):
        super().__init__()
        self.padding_idx = padding_idx
        self.words = nn.Embedding(vocab, hidden, padding_idx=padding_idx)
        self.positions = nn.Embedding(vocab, hidden, padding_idx=padding_idx)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        mask = ids.ne(self.padding_idx).int()
        incremental = (torch.cumsum(mask, dim=1).type_as(mask) + 0) * mask
        position_ids = incremental.long() + self.padding_idx
        x = self.words(ids) + self.positions(position_ids)
        keep = (ids != self.padding_idx).unsqueeze(-1)
        return self.head(x * keep)


def roberta_graph():
    ids = torch.tensor([[0, 5, 7, 1, 1], [0, 9, 3, 4, 1]])
    return loom.trace(RobertaPositions(), {"ids": ids, "y": ids},
                      loss=lambda out, b: F.cross_entropy(out.flatten(0, 1), b["y"].flatten()))


def types(graph):
    return [op["type"] for op in graph["ops"]]


def test_roberta_position_ids_lower_to_ne_and_cumsum():
    graph = roberta_graph()
    assert types(graph)[:2] == ["ne", "cast"]
    assert "cumsum" in types(graph)
    cumsum = next(op for op in graph["ops"] if op["type"] == "cumsum")
    assert cumsum["attrs"] == {"dim": 1}
    tensors = graph["tensors"]
    assert tensors[cumsum["outputs"][0]]["dtype"] == "i64"  # torch promotes, as the engine does
    assert tensors[graph["ops"][0]["outputs"][0]]["dtype"] == "bool"


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.table = nn.Parameter(torch.randn(10, 4))

    def forward(self, x, rows):
        y = F.interpolate(self.conv(x), scale_factor=2, mode="nearest")  # [n 4 8 8]
        y = F.pad(y, (1, 1, 0, 2), value=0.5)                             # [n 4 10 10]
        y = y + F.interpolate(y[:, :, :5, :4], size=(10, 10), mode="bilinear", align_corners=False)
        y = y + torch.zeros_like(y) + y.new_ones(y.shape[-1])
        picked = torch.index_select(self.table, 0, rows) + self.table[rows]  # [k 4]; x[ids] too
        picked = picked + self.table[torch.tensor([1, 4])]                 # a constant index (Swin V2)
        return (y.mean(dim=(2, 3)) @ picked.t()).lt(0.0).float().sum() + y.sum() + picked.sum()


def mixed_graph():
    batch = {"x": torch.randn(2, 3, 4, 4), "rows": torch.tensor([3, 7])}
    return loom.trace(Mixed(), batch, loss=lambda out, b: out)


def test_pad_interpolate_index_select_and_fills():
    graph = mixed_graph()
    by_type = {op["type"]: op for op in graph["ops"]}
    assert by_type["upsample_nearest2d"]["attrs"] == {"scale": 2}
    assert by_type["pad"]["attrs"] == {"pads": [1, 1, 0, 2], "value": {"real": 0.5}}
    assert [op["attrs"] for op in graph["ops"] if op["type"] == "index_select"] == [{"dim": 0}] * 3
    assert by_type["upsample_bilinear2d"]["attrs"] == {"output_size": [10, 10]}
    assert "lt" in by_type
    tensors = graph["tensors"]
    assert tensors[by_type["pad"]["outputs"][0]]["shape"] == [2, 4, 10, 10]
    # zeros_like is a constant; repeated along the batch, it is stored once and expanded
    # (tracer_lowering.py, constant()).
    expand = next(op for op in graph["ops"] if op["type"] == "expand" and op["attrs"]["shape"] == [2, 4, 10, 10])
    stored = tensors[expand["inputs"][0]]
    assert stored["role"] == "buffer" and stored["shape"] == [1, 1, 1, 1] and stored["value"] == [0.0]


class Extremes(nn.Module):
    """OpenLlama's clamp of attention scores to the dtype's minimum, a detached branch, ZeroPad2d."""

    def __init__(self):
        super().__init__()
        self.pad = nn.ZeroPad2d((0, 1, 0, 1))
        self.proj = nn.Linear(5, 5)

    def forward(self, x):
        y = self.proj(self.pad(x))                                   # [n c 5 5]
        y = torch.max(y, torch.tensor(torch.finfo(torch.float32).min)) + torch.minimum(y, y.detach() * 2)
        return y.max() + y.sum()


def test_maximum_minimum_detach_and_zero_pad():
    graph = loom.trace(Extremes(), {"x": torch.randn(2, 3, 4, 4)}, loss=lambda out, b: out)
    assert types(graph) == ["pad", "linear", "maximum", "recycle_detach", "scale", "minimum", "add", "amax",
                            "sum", "add"]
    assert graph["ops"][0]["attrs"] == {"pads": [0, 1, 0, 1]}


def test_euclidean_norm_is_the_root_of_summed_squares():
    class Grn(nn.Module):  # ConvNeXt V2's global response normalization
        def forward(self, x):
            g = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
            return (x * g).sum() + x.norm()

    graph = loom.trace(Grn(), {"x": torch.randn(2, 4, 4, 3)}, loss=lambda out, b: out)
    safe_sqrt = ["gt", "where", "sqrt", "where"]  # a zero sum gives 0 and no NaN gradient
    assert types(graph) == ["square", "sum", *safe_sqrt, "mul", "sum", "square", "sum", *safe_sqrt, "add"]
    assert graph["ops"][1]["attrs"] == {"dims": [1, 2], "keepdim": True}


class Composite(nn.Module):
    """F.normalize, Tensor.repeat and nn.AdaptiveAvgPool1d(1), lowered to existing ops."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.proj = nn.Linear(4, 4)

    def forward(self, x):                                   # [2 3 4]
        x = self.proj(x)
        unit = F.normalize(x, dim=-1)
        tiled = x.repeat(1, 1, 3)                           # [2 3 12]
        probe = self.proj.bias[None, None, :].repeat(2, 3, 1)  # [2 3 4]: an expand
        return unit.sum() + tiled.sum() + self.pool(x).sum() + (probe * x).sum()


def test_normalize_repeat_and_global_1d_pooling_match_torch_shapes():
    graph = loom.trace(Composite(), {"x": torch.randn(2, 3, 4)}, loss=lambda out, b: out)
    assert types(graph)[:6] == ["linear", "square", "sum", "clamp", "sqrt", "div"]  # the clamp floors the squared norm
    expands = [op["attrs"]["shape"] for op in graph["ops"] if op["type"] == "expand"]
    assert expands == [[2, 3, 3, 4], [2, 3, 4]]
    assert next(op for op in graph["ops"] if op["type"] == "mean")["attrs"] == {"dims": [2], "keepdim": True}


def test_clamp_with_a_constant_tensor_bound():
    class LogitScale(nn.Module):  # Swin V2's cosine attention scale
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(4, 1, 1))

        def forward(self, x):
            return (x * torch.clamp(self.scale, max=torch.log(torch.tensor(1.0 / 0.01))).exp()).sum()

    graph = loom.trace(LogitScale(), {"x": torch.randn(2, 4, 3, 3)}, loss=lambda out, b: out)
    clamp = next(op for op in graph["ops"] if op["type"] == "clamp")
    assert clamp["attrs"] == {"max": {"real": torch.log(torch.tensor(100.0)).item()}}


def test_repeat_lowering_reproduces_torch_values():
    class Tile(nn.Module):
        def __init__(self, repeats):
            super().__init__()
            self.repeats = repeats

        def forward(self, x):
            return x.repeat(*self.repeats).sum()

    x = torch.randn(2, 1, 4)
    for repeats in [(1, 1, 3), (2, 1, 2), (3, 2, 5, 1), (2, 2, 1, 1, 2)]:
        graph = loom.trace(Tile(repeats), {"x": x}, loss=lambda out, b: out)
        value = x
        for op in graph["ops"][:-1]:  # the engine's reshape / expand chain, replayed in torch
            assert op["type"] in ("reshape", "expand"), repeats
            value = value.reshape(op["attrs"]["shape"]) if op["type"] == "reshape" else value.expand(op["attrs"]["shape"])
        assert torch.equal(value, x.repeat(*repeats)), repeats


def test_unsupported_forms_are_reported():
    class Bad(nn.Module):
        def forward(self, x):
            return F.pad(x, (1, 1, 1, 1), mode="reflect").sum() + F.interpolate(x, scale_factor=2, mode="bicubic").sum()

    inputs = {"x": torch.randn(1, 2, 4, 4)}
    try:
        loom.trace(Bad(), inputs, loss=lambda out, b: out, capture="fx")
    except loom.UnsupportedOpsError as e:
        reported = " ".join(e.unsupported)
        assert "pad" in reported and "interpolate" in reported
    else:
        raise AssertionError("reflect padding and bicubic interpolation have no engine op")
    # At the ATen level both are reads at constant positions (index with index tensors: index_select).
    from test_trace_lowered_values import evaluate, loss_of
    graph = loom.trace(Bad(), inputs, loss=lambda out, b: out, capture="export")
    assert {op["type"] for op in graph["ops"]} >= {"index_select"}
    assert math.isclose(loss_of(graph, evaluate(graph, Bad(), inputs)), Bad()(**inputs).item(), rel_tol=1e-5)


def test_the_engine_resolves_and_plans_the_new_ops(tmp_path, run_loom):
    extremes = loom.trace(Extremes(), {"x": torch.randn(2, 3, 4, 4)}, loss=lambda out, b: out)
    composite = loom.trace(Composite(), {"x": torch.randn(2, 3, 4)}, loss=lambda out, b: out)
    for name, graph in (("roberta", roberta_graph()), ("mixed", mixed_graph()), ("extremes", extremes),
                        ("composite", composite)):
        path = tmp_path / f"{name}.json"
        loom.save_graph(graph, path)
        result = run_loom("graph", "--from", str(path))
        assert result.returncode == 0, result.stderr
        for policy in (["--policy", "dp", "--gpus", "2"], ["--policy", "megatron", "--tp", "2", "--gpus", "2"]):
            result = run_loom("plan", "--graph", str(path), *policy, "--out", str(tmp_path / f"{name}-out"))
            assert result.returncode == 0, f"{name} {policy}: {result.stderr}"
