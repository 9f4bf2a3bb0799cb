"""loom.trace on hand-written modules: the graph's content, the loss, and the errors."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import loom


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(self.drop(self.act(self.fc1(x))))


def mlp_graph():
    batch = {"x": torch.randn(8, 16), "y": torch.randint(0, 10, (8,))}
    return loom.trace(MLP(), batch, loss=lambda out, b: F.cross_entropy(out, b["y"]))


def parameter_count(graph):
    return sum(math.prod(t["shape"]) for t in graph["tensors"] if t["role"] == "parameter")


def test_mlp_with_a_loss_function_maps_modules_to_registry_ops():
    graph = mlp_graph()
    assert graph["format"] == "loom-graph" and graph["version"] == 1
    assert [op["type"] for op in graph["ops"]] == ["linear", "gelu", "dropout", "linear", "cross_entropy"]
    assert all("annotation" not in op for op in graph["ops"])  # the engine resolves them
    tensors = graph["tensors"]
    assert [tensors[i]["name"] for i in graph["inputs"]] == ["x", "y"]
    assert [tensors[i]["name"] for i in graph["parameters"]] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    loss = tensors[graph["loss"]]
    assert loss["shape"] == [] and loss["dtype"] == "f32"
    assert graph["ops"][2]["attrs"] == {"p": {"real": 0.1}}
    assert tensors[graph["ops"][0]["outputs"][0]]["shape"] == [8, 32]


def test_parameter_count_equals_the_modules():
    module = MLP()
    graph = loom.trace(module, {"x": torch.randn(4, 16), "y": torch.randint(0, 10, (4,))},
                       loss=lambda out, b: F.cross_entropy(out, b["y"]))
    assert parameter_count(graph) == sum(p.numel() for p in module.parameters())


class Functional(nn.Module):
    """Functional forms, scalars, tensor indexing, constants folded from sizes, and a tied weight."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, ids):
        h = self.embed(ids) * 2.0 + 1.0
        h = self.norm(h)
        positions = torch.arange(ids.size(1))  # folded: a constant buffer
        h = h + positions.unsqueeze(-1).to(h.dtype)
        h = F.silu(h)[:, :-1, :]
        logits = F.linear(h, self.embed.weight)  # tied to the embedding
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))


def test_functional_forms_scalars_slices_and_tied_weights():
    module = Functional()
    graph = loom.trace(module, torch.randint(0, 32, (2, 6)))
    types = [op["type"] for op in graph["ops"]]
    assert types.count("embedding") == 1 and "scale" in types and "slice" in types and "linear" in types
    assert parameter_count(graph) == sum(p.numel() for p in module.parameters())
    roles = {t["name"]: t["role"] for t in graph["tensors"]}
    assert roles["embed.weight"] == "parameter"
    assert any(role == "buffer" for role in roles.values())  # the folded positions and the scalar 1.0


class WithFFT(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = torch.fft.fft(self.fc(x)).real
        y = torch.fft.fft(y).real + torch.cumsum(y, dim=-1)
        return y.mean()


def test_unknown_ops_are_all_listed_in_one_error_with_the_hint():
    with pytest.raises(loom.UnsupportedOpsError) as caught:
        loom.trace(WithFFT(), torch.randn(2, 8))
    message = str(caught.value)
    assert "torch.fft.fft: 2 use(s)" in message
    assert "cumsum" in message
    assert 'loom.register_op(fn, "annotation")' in message
    assert set(caught.value.unsupported) >= {"torch.fft.fft"}


def test_a_model_without_a_scalar_loss_is_refused():
    with pytest.raises(ValueError, match="no scalar loss"):
        loom.trace(MLP(), torch.randn(4, 16))


def test_save_graph_then_the_engine_reads_it(tmp_path, run_loom):
    path = tmp_path / "mlp.json"
    loom.save_graph(mlp_graph(), path)
    result = run_loom("graph", "--from", str(path))
    assert result.returncode == 0, result.stderr
    assert "forward          5 ops" in result.stdout
    assert "parameters   874" in result.stdout


class Branchy(nn.Module):
    """Control flow on an argument: resolved by concrete_args."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, double=False):
        y = self.fc(x)
        if double:
            y = y * 2
        return y.sum()


def test_concrete_args_resolve_control_flow():
    plain = loom.trace(Branchy(), torch.randn(3, 4))
    doubled = loom.trace(Branchy(), torch.randn(3, 4), concrete_args={"double": True})
    assert [op["type"] for op in plain["ops"]] == ["linear", "sum"]
    assert [op["type"] for op in doubled["ops"]] == ["linear", "scale", "sum"]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class TwoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Block(), Block()

    def forward(self, x):
        return self.b(self.a(x)).mean()


def test_leaf_modules_stay_whole_and_unmapped_ones_are_reported_by_path():
    assert [op["type"] for op in loom.trace(TwoBlocks(), torch.randn(2, 4))["ops"]] == \
        ["linear", "relu", "linear", "relu", "mean"]
    with pytest.raises(loom.UnsupportedOpsError) as caught:
        loom.trace(TwoBlocks(), torch.randn(2, 4), leaf_modules=(Block,))
    (target, info), = caught.value.unsupported.items()
    assert target.endswith("Block") and info == {"where": ["a", "b"], "count": 2}
