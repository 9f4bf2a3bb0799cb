"""A small GPT-2 from transformers (random init from a config, no weights downloaded): traced (torch.fx and
torch.export), saved, read by the engine and planned with `loom plan --graph`."""

import math
import re

import pytest
import torch
from conftest import HF_ROUTES

import loom

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module", params=HF_ROUTES)
def gpt2(request):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 128, (4, 16))
    return model, loom.trace(model, {"input_ids": ids, "labels": ids}, capture=request.param)


@pytest.fixture(scope="module")
def gpt2_file(gpt2, tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt2") / "gpt2.json"
    loom.save_graph(gpt2[1], path)
    return str(path)


def test_gpt2_traces_with_its_own_loss_and_all_parameters(gpt2):
    model, graph = gpt2
    tensors = graph["tensors"]
    assert sum(math.prod(t["shape"]) for t in tensors if t["role"] == "parameter") == \
        sum(p.numel() for p in model.parameters())
    names = {tensors[i]["name"] for i in graph["parameters"]}
    assert "transformer.h.0.attn.c_attn.weight" in names and "transformer.wte.weight" in names
    assert "lm_head.weight" not in names  # tied to transformer.wte.weight: one tensor
    assert tensors[graph["loss"]]["shape"] == []
    # The loss's counted tokens: derived from the labels (each row's first dropped by the shift), not given.
    assert [tensors[i]["name"] for i in graph["inputs"]] == ["input_ids", "labels", "labels.counted_tokens"]
    assert tensors[graph["inputs"][2]]["derived"]["from"] == graph["inputs"][1]
    assert tensors[graph["inputs"][2]]["derived"]["trim"] == [[0, 0], [1, 0]]
    attention = [op for op in graph["ops"] if op["type"] == "scaled_dot_product_attention"]
    assert len(attention) == 2  # HuggingFace's constant causal mask becomes the causal attribute
    assert all(op["attrs"]["causal"] is True and len(op["inputs"]) == 3 for op in attention)
    types = {op["type"] for op in graph["ops"]}
    assert {"embedding", "layer_norm", "scaled_dot_product_attention", "matmul", "cross_entropy"} <= types


def test_the_fused_qkv_is_laid_out_per_part_for_tensor_parallelism(gpt2):
    # c_attn(x).split(64, dim=2): the weight [64, 192] is traced as its view [64, 3, 64], an einsum whose
    # 'n' a tensor-parallel split cuts per part (the same heads of q, k and v on each rank).
    model, graph = gpt2
    tensors = graph["tensors"]
    by_name = {t["name"]: t for t in tensors}
    assert by_name["transformer.h.0.attn.c_attn.weight"]["shape"] == [64, 3, 64]
    assert by_name["transformer.h.0.attn.c_attn.bias"]["shape"] == [3, 64]
    assert by_name["transformer.h.0.mlp.c_fc.weight"]["shape"] == [64, 256]  # not split: left as is
    einsums = [op for op in graph["ops"] if op["type"] == "einsum"]
    assert len(einsums) == 2 and all(op["attrs"] == {"equation": "ak,kpn->apn"} for op in einsums)
    splits = [op for op in graph["ops"] if op["type"] == "split"]
    assert all(op["attrs"] == {"dim": 2, "sizes": [1, 1, 1]} for op in splits)
    weight = model.transformer.h[0].attn.c_attn.weight
    assert weight.view(64, 3, 64)[:, 1, :].equal(weight[:, 64:128])  # a view: part k is columns k*64..


def test_the_engine_reads_the_traced_gpt2(gpt2_file, run_loom):
    result = run_loom("graph", "--from", gpt2_file)
    assert result.returncode == 0, result.stderr
    assert "graph GPT2LMHeadModel" in result.stdout


@pytest.mark.parametrize("policy", [["--policy", "megatron", "--dp", "2", "--tp", "2", "--gpus", "4"], ["--policy", "dp", "--gpus", "2"]])
def test_loom_plan_graph_plans_the_traced_gpt2(gpt2_file, run_loom, tmp_path, policy):
    result = run_loom("plan", "--graph", gpt2_file, *policy, "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    step = re.search(r"step time\s+([0-9.]+) (us|ms|s)\b", result.stdout)
    assert step and float(step.group(1)) > 0, result.stdout
    assert (tmp_path / "out" / "report.html").exists()
