"""capture="export" (torch.export at the ATen level, python/loom/export_capture.py): the exported graph of
transformers' GPT-2, LLaMA and T5 computes the module's loss op by op; ops are named by their module paths;
a model on the meta device captures as the same model on the CPU does, without its weights; every unknown
ATen op is listed in one error with where it occurs."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_torch_reference import build_model, make_batches
from test_trace_lowered_values import evaluate, loss_of

import loom

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def quiet():
    transformers.logging.set_verbosity_error()


@pytest.mark.parametrize("name", ["gpt2", "llama", "t5"])
def test_the_exported_graph_computes_the_modules_loss(name):
    model, batches = build_model(name), make_batches(name)
    graph = loom.trace(model, batches[0], capture="export", batch_dim=None)
    for batch in batches[:2]:  # the inputs are graph inputs, not folded: another batch gives its own loss
        with torch.no_grad():
            want = model(**batch).loss.item()
        assert math.isclose(loss_of(graph, evaluate(graph, model, batch)), want, rel_tol=1e-5)


def test_ops_are_named_by_the_module_that_runs_them():
    model, batches = build_model("llama"), make_batches("llama")
    graph = loom.trace(model, batches[0], capture="export", batch_dim=None)
    tensors = graph["tensors"]
    checked = 0
    for op in graph["ops"]:
        weights = [tensors[i]["name"] for i in op["inputs"] if tensors[i]["role"] == "parameter"]
        if op["type"] in ("linear", "embedding") and weights:
            module = weights[0].rsplit(".", 1)[0]  # model.layers.0.self_attn.q_proj.weight -> its module
            assert op["name"].startswith(module + "."), (op["name"], weights[0])
            checked += 1
    assert checked == 4 * 7 + 2  # 7 projections a layer, the token table, the LM head


def _tiny_llama_config():
    return transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=128, vocab_size=128, max_position_embeddings=64)


def _without_values(graph):
    return {**graph, "tensors": [{k: v for k, v in t.items() if k != "value"} for t in graph["tensors"]]}


def test_a_model_on_the_meta_device_captures_as_on_the_cpu():
    config = _tiny_llama_config()
    ids = torch.randint(0, 128, (2, 16))
    batch = {"input_ids": ids, "labels": ids}
    on_cpu = loom.trace(transformers.LlamaForCausalLM(config), batch, capture="export")
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    on_meta = loom.trace(model, batch, capture="export")
    assert all(p.device.type == "meta" for p in model.parameters())
    assert _without_values(on_meta) == _without_values(on_cpu)  # the same ops, shapes, dtypes and batch sizes
    # Constants computed from the meta model's buffers (the rotary tables) have no elements; the rest do.
    valued = lambda g: {t["name"] for t in g["tensors"] if "value" in t}  # noqa: E731
    assert valued(on_meta) < valued(on_cpu)


def test_a_mid_size_model_on_meta_plans(run_loom, tmp_path):
    # 0.49 B parameters (2 GB in float32), never allocated: the graph holds their shapes and dtypes.
    config = transformers.LlamaConfig(num_hidden_layers=8, hidden_size=2048, num_attention_heads=16,
                                      num_key_value_heads=4, intermediate_size=5632, vocab_size=32000,
                                      max_position_embeddings=1024)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 32000, (2, 1024))
    graph = loom.trace(model, {"input_ids": ids, "labels": ids}, capture="export")
    elements = sum(math.prod(graph["tensors"][i]["shape"]) for i in graph["parameters"])
    assert elements == sum(p.numel() for p in model.parameters()) > 4 * 10**8
    loom.save_graph(graph, tmp_path / "g.json")
    result = run_loom("plan", "--graph", str(tmp_path / "g.json"), "--global-batch", "16", "--policy", "megatron",
                      "--tp", "2", "--pp", "2", "--dp", "2", "--microbatches", "4", "--gpus", "8",
                      "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr


class TwoUnknowns(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        y = torch.sort(self.first(x), dim=-1).values
        z = torch.sort(self.second(y), dim=-1).values
        return torch.erfinv(z.tanh() * 0.5).sum()


def test_every_unknown_aten_op_is_listed_with_where_it_occurs():
    with pytest.raises(loom.UnsupportedOpsError) as error:
        loom.trace(TwoUnknowns(), {"x": torch.randn(3, 4)}, capture="export")
    unsupported = error.value.unsupported
    assert set(unsupported) == {"aten.sort.default", "aten.erfinv.default"}
    assert unsupported["aten.sort.default"]["count"] == 2
    assert "register" in str(error.value)


def test_an_unknown_capture_route_is_refused():
    with pytest.raises(ValueError, match="capture='dynamo'.*'fx', 'export', 'auto'"):
        loom.trace(nn.Linear(2, 1), {"input": torch.randn(3, 2)}, loss=lambda out, b: out.sum(), capture="dynamo")


class LoopsOverRows(nn.Module):
    """len(x) steers a Python loop: torch.fx's proxies refuse it; torch.export runs it on the example's sizes."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return sum(self.proj(x[i]).tanh().sum() for i in range(len(x)))


def test_auto_takes_export_where_fx_fails():
    torch.manual_seed(0)
    module, inputs = LoopsOverRows(), {"x": torch.randn(3, 4)}
    with pytest.raises(Exception, match="len"):
        loom.trace(module, inputs, capture="fx", batch_dim=None)
    graph = loom.trace(module, inputs, batch_dim=None)  # capture="auto"
    with torch.no_grad():
        want = module(**inputs).item()
    assert math.isclose(loss_of(graph, evaluate(graph, module, inputs)), want, rel_tol=1e-5)


def test_auto_captures_a_model_on_meta_through_export():
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(_tiny_llama_config())
    ids = torch.randint(0, 128, (2, 16))
    batch = {"input_ids": ids, "labels": ids}
    assert loom.trace(model, batch) == loom.trace(model, batch, capture="export")


class BandAttention(nn.Module):
    """Attention under a constant boolean mask that is not causal (each query sees itself and its neighbours)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 4).permute(2, 0, 3, 1, 4)
        i = torch.arange(x.shape[1])
        band = (i[:, None] - i[None, :]).abs() <= 1
        return F.scaled_dot_product_attention(q, k, v, attn_mask=band).pow(2).mean()


@pytest.mark.parametrize("capture", ["fx", "export"])
def test_a_constant_boolean_mask_becomes_the_additive_bias(capture):
    torch.manual_seed(0)
    module, inputs = BandAttention(), {"x": torch.randn(2, 5, 8)}
    graph = loom.trace(module, inputs, capture=capture, batch_dim=None)
    assert any(op["type"] == "scaled_dot_product_attention" and len(op["inputs"]) == 4 for op in graph["ops"])
    with torch.no_grad():
        want = module(**inputs).item()
    assert math.isclose(loss_of(graph, evaluate(graph, module, inputs)), want, rel_tol=1e-5)
