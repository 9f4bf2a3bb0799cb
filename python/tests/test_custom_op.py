"""loom.register_op (docs/custom_ops.md): a user's fused bias-GELU, which the tracer cannot map (torch.erf),
is registered with the annotation "b s h, h -> b s h"; the traced graph keeps its calls whole as one op
"custom.bias_gelu", the engine splits it as the annotation allows (batch under dp, hidden under tp), and
the generated programs call the function itself on their shards, its backward by autograd: one step of
dp 2 and tp 2 equals the single-device plan (float32, rtol 1e-5)."""

import json
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import loom_runner

import loom
from loom import custom_ops
from loom.runtime.launch import launch

RTOL = 1e-5
FLOOR = 1e-6


def bias_gelu(x, bias):
    """GELU of x + bias with erf, as a fused kernel would compute it."""
    y = x + bias
    return 0.5 * y * (1.0 + torch.erf(y * (1.0 / math.sqrt(2.0))))


def plain_bias_gelu(x, bias):
    """The same function, never registered: the tracer goes into it and meets torch.erf."""
    y = x + bias
    return 0.5 * y * (1.0 + torch.erf(y * (1.0 / math.sqrt(2.0))))


def scaled_pair(x):
    """Two outputs, to check tuples: x * 2 and x * 3 (registered with a '*' annotation)."""
    return x * 2.0, x * 3.0


def biased_softmax(x, bias):
    """Mixes along h: registered below with an annotation that wrongly lets h be split."""
    return torch.softmax(x + bias, dim=-1)


loom.register_op(bias_gelu, "b s h, h -> b s h", flops=8)
loom.register_op(scaled_pair, "* -> *, *", name="scaled_pair")
loom.register_op(biased_softmax, "b s h, h -> b s h")  # wrong on purpose: should be "b s h^, h^ -> b s h^"


class FusedMLP(nn.Module):
    def __init__(self, width=16, hidden=32):
        super().__init__()
        self.up = nn.Linear(width, hidden, bias=False)
        self.bias = nn.Parameter(torch.randn(hidden) * 0.1)
        self.down = nn.Linear(hidden, width)

    def forward(self, x, target):
        # Called by its module-level name: that is the call the tracer keeps whole.
        return F.mse_loss(self.down(bias_gelu(self.up(x), self.bias)), target)


class PlainMLP(FusedMLP):
    def forward(self, x, target):
        return F.mse_loss(self.down(plain_bias_gelu(self.up(x), self.bias)), target)


class SoftmaxMLP(FusedMLP):
    def forward(self, x, target):
        return F.mse_loss(self.down(biased_softmax(self.up(x), self.bias)), target)


class PairModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        a, b = scaled_pair(self.fc(x))
        return (a * b).mean()


def examples():
    torch.manual_seed(0)
    return {"x": torch.randn(4, 6, 16), "target": torch.randn(4, 6, 16)}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    torch.manual_seed(0)
    graph = loom.trace(FusedMLP(), examples())
    path = tmp_path_factory.mktemp("custom") / "fused_mlp.json"
    loom.save_graph(graph, path)
    return graph, path


def test_a_registered_function_is_one_custom_op_with_its_definition(traced):
    graph, _ = traced
    custom = [o for o in graph["ops"] if o["type"] == "custom.bias_gelu"]
    assert len(custom) == 1
    assert custom[0]["attrs"] == {"callable": "test_custom_op:bias_gelu"}
    assert graph["custom_ops"] == [{"type": "custom.bias_gelu", "annotation": "b s h, h -> b s h",
                                    "flops_per_element": 8.0, "differentiable": True}]
    assert not any(o["type"] in ("erf", "add") for o in graph["ops"]), "the function's body stays inside it"


def test_an_unregistered_function_gives_the_one_error_with_the_hint():
    with pytest.raises(loom.UnsupportedOpsError) as caught:
        loom.trace(PlainMLP(), examples())
    message = str(caught.value)
    assert "torch.erf" in message
    assert message.count("unsupported op(s)") == 1
    assert 'loom.register_op(fn, "annotation")' in message


def test_tuple_outputs_trace_as_one_op_with_two_outputs():
    graph = loom.trace(PairModel(), torch.randn(2, 8))
    pair = [o for o in graph["ops"] if o["type"] == "custom.scaled_pair"]
    assert len(pair) == 1 and len(pair[0]["outputs"]) == 2
    assert graph["custom_ops"][0]["annotation"] == "* -> *, *"


def test_register_op_refuses_what_the_ranks_cannot_import_or_read():
    def local(x):
        return x
    with pytest.raises(ValueError, match="module level"):
        loom.register_op(local, "a -> a")
    with pytest.raises(ValueError, match="exactly one '->'"):
        loom.register_op(plain_bias_gelu, "b s h, h")
    with pytest.raises(ValueError, match="already"):
        loom.register_op(plain_bias_gelu, "b s h, h -> b s h", name="bias_gelu")
    with pytest.raises(ValueError, match="flops"):
        loom.register_op(plain_bias_gelu, "b s h, h -> b s h", flops=-1)
    assert custom_ops.registered(plain_bias_gelu) is None


def test_the_engine_names_a_bad_annotation_and_the_fix(traced, run_loom, tmp_path):
    graph, _ = traced
    bad = json.loads(json.dumps(graph))
    bad["custom_ops"][0]["annotation"] = "b h, h -> b h"  # rank 2 for a rank-3 argument
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    result = run_loom("plan", "--graph", str(path), "--policy", "dp", "--dp", "2", "--gpus", "2", "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert "custom.bias_gelu" in result.stderr and "loom.register_op" in result.stderr, result.stderr


def worst_relative(reference, candidate):
    worst, where = 0.0, ""
    for name, want in reference.items():
        diff = (candidate[name].double() - want.double()).abs().max().item()
        rel = diff / max(want.double().abs().max().item(), FLOOR)
        if rel >= worst:
            worst, where = rel, name
    return worst, where


@pytest.fixture(scope="module")
def single_device(traced, tmp_path_factory, loom_binary):
    directory = tmp_path_factory.mktemp("custom-single")
    result = loom_runner(loom_binary)("plan", "--graph", str(traced[1]), "--policy", "dp", "--dp", "1", "--gpus", "1",
                                      "--out", str(directory / "out"), "--emit", str(directory / "emit"))
    assert result.returncode == 0, result.stdout + result.stderr
    return launch(directory / "emit", timeout=120)


@pytest.mark.parametrize(("plan", "args", "split"), [
    ("dp2", ["--policy", "dp", "--dp", "2", "--gpus", "2"], [2, 6, 32]),
    ("tp2", ["--policy", "tp", "--tp", "2", "--gpus", "2"], [4, 6, 16]),
    # No numbered layers: stages of balanced FLOPs, the custom op's counted from its registration.
    ("pp2", ["--policy", "pp", "--pp", "2", "--microbatches", "2", "--gpus", "2"], [2, 6, 32]),
])
def test_the_custom_op_is_split_by_its_annotation_and_trains_as_one_device(traced, single_device, run_loom, tmp_path,
                                                                           plan, args, split):
    result = run_loom("plan", "--graph", str(traced[1]), *args, "--out", str(tmp_path / "out"),
                      "--emit", str(tmp_path / "emit"))
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((tmp_path / "emit" / "manifest.json").read_text())
    shapes = [piece["shape"] for sub_op in manifest_sub_ops(manifest)
              if sub_op["type"] == "custom.bias_gelu" and "backward_of" not in sub_op for piece in sub_op["outputs"]]
    assert shapes and all(s == split for s in shapes), f"{plan}: the custom op's output pieces are {shapes}"
    values = launch(tmp_path / "emit", timeout=120)
    assert sorted(values) == sorted(single_device)
    worst, where = worst_relative(single_device, values)
    print(f"custom op {plan}: worst rel {worst:.2e} ({where})")
    assert worst <= RTOL, f"{where}: relative error {worst:.3e}"


def manifest_sub_ops(manifest):
    """Every sub-op entry of the manifest, whatever the nesting (per rank lists or one table)."""
    found = []

    def visit(value):
        if isinstance(value, dict):
            if "type" in value and "outputs" in value and "attrs" in value:
                found.append(value)
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)
    visit(manifest)
    return found


def test_a_wrong_annotation_shows_in_the_runtimes_check(run_loom, tmp_path):
    # The check has teeth: a function that mixes along h, annotated as if it did not, splits wrongly under
    # tp 2, and the step then differs from the single-device one.
    torch.manual_seed(0)
    loom.save_graph(loom.trace(SoftmaxMLP(), examples()), tmp_path / "softmax.json")
    values = {}
    for name, args in {"single": ["--policy", "dp", "--dp", "1", "--gpus", "1"], "tp2": ["--policy", "tp", "--tp", "2", "--gpus", "2"]}.items():
        result = run_loom("plan", "--graph", str(tmp_path / "softmax.json"), *args, "--out", str(tmp_path / name / "out"),
                          "--emit", str(tmp_path / name / "emit"))
        assert result.returncode == 0, result.stdout + result.stderr
        values[name] = launch(tmp_path / name / "emit", timeout=120)
    worst, where = worst_relative(values["single"], values["tp2"])
    assert worst > 1e-3, f"a wrongly split softmax should differ ({where}: {worst:.2e})"
