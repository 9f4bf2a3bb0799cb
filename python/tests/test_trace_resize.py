"""A traced graph resizes (docs/json.md, "sizes"): loom.trace records which sizes are the batch, and
`loom plan --graph g.json --global-batch N` plans it at N as if traced there."""

import json

import pytest
import torch
from conftest import HF_ROUTES

import loom

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module", params=HF_ROUTES)
def traced(tmp_path_factory, request):
    """A small GPT-2 traced at batch 2 and at batch 8 (by each capture route), saved."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 128, (8, 16))
    directory = tmp_path_factory.mktemp("resize")
    files = {}
    for batch in (2, 8):
        graph = loom.trace(model, {"input_ids": ids[:batch], "labels": ids[:batch]}, capture=request.param)
        files[batch] = directory / f"b{batch}.json"
        loom.save_graph(graph, files[batch])
    return files


def _structure(graph):
    """The graph without names (a trace numbers its nodes per process: loss_0, loss_1)."""
    tensors = [{k: v for k, v in t.items() if k != "name"} for t in graph["tensors"]]
    ops = [{k: v for k, v in op.items() if k != "name"} for op in graph["ops"]]
    return tensors, ops


def test_the_trace_records_the_batch_sizes(traced):
    graph = json.loads(traced[2].read_text())
    sizes = graph["sizes"]
    assert sizes["version"] == 1 and sizes["symbols"] == {"batch": 2}
    inputs = {t["id"]: t for t in sizes["tensors"]}
    batched = [i for i in graph["inputs"] if "derived" not in graph["tensors"][i]]  # the counted tokens: a scalar
    assert len(batched) == 2 and all(inputs[i]["shape"] == ["batch", 16] for i in batched)
    # The flattened [batch x seq, width] views and their reshape targets.
    assert any(t["shape"] == ["16*batch", 64] for t in sizes["tensors"])
    assert any(a["name"] == "shape" and a["value"] == ["16*batch", 64] for a in sizes["attrs"])


def test_a_graph_resized_to_batch_8_equals_the_trace_at_8(traced, run_loom, tmp_path):
    resized, direct = tmp_path / "resized.json", tmp_path / "direct.json"
    a = run_loom("graph", "--from", str(traced[2]), "--batch", "8", "--json", str(resized))
    b = run_loom("graph", "--from", str(traced[8]), "--json", str(direct))
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert _structure(json.loads(resized.read_text())) == _structure(json.loads(direct.read_text()))
    flops = [line for line in a.stdout.splitlines() if "FLOPs" in line or "activations" in line]
    assert flops and flops == [line for line in b.stdout.splitlines() if "FLOPs" in line or "activations" in line]


def test_loom_plan_at_another_global_batch_prices_the_bigger_step(traced, run_loom, tmp_path):
    plans = []
    for args in (["--graph", str(traced[2]), "--global-batch", "8"], ["--graph", str(traced[8])]):
        result = run_loom("plan", *args, "--policy", "dp", "--gpus", "2", "--json", "--out", str(tmp_path / "out"))
        assert result.returncode == 0, result.stderr
        plans.append(json.loads(result.stdout))
    keys = ("step_time_s", "mfu", "model_flops_per_step", "samples_per_s", "tokens_per_s")
    assert {k: plans[0]["summary"][k] for k in keys} == {k: plans[1]["summary"][k] for k in keys}
    assert [d["peak_bytes"] for d in plans[0]["summary"]["per_device"]] == \
        [d["peak_bytes"] for d in plans[1]["summary"]["per_device"]]
    assert plans[0]["resolved"]["global_batch"] == 8 and plans[0]["summary"]["step_time_s"] > 0


def test_a_graph_without_the_record_refuses_another_batch(traced, run_loom, tmp_path):
    graph = json.loads(traced[2].read_text())
    del graph["sizes"]
    bare = tmp_path / "bare.json"
    loom.save_graph(graph, bare)
    result = run_loom("plan", "--graph", str(bare), "--global-batch", "8", "--policy", "dp", "--gpus", "2",
                      "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert "traced at batch 2 and does not record which of its sizes are the batch" in result.stderr
    assert "--global-batch 8" in result.stderr
    same = run_loom("plan", "--graph", str(bare), "--global-batch", "2", "--policy", "dp", "--gpus", "2",
                    "--out", str(tmp_path / "out2"))
    assert same.returncode == 0, same.stderr


def test_batch_dim_none_records_nothing():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    x = torch.randn(5, 4)
    graph = loom.trace(model, (x,), loss=lambda out, batch: out.sum(), batch_dim=None)
    assert "sizes" not in graph
    graph = loom.trace(model, (x,), loss=lambda out, batch: out.sum())
    assert graph["sizes"]["symbols"] == {"batch": 5}


@pytest.mark.parametrize("capture", HF_ROUTES)
def test_t5_resizes_with_its_masks_expanded_to_the_batch(capture, run_loom, tmp_path):
    # T5's attention masks are constants of the batch's size (masks of ones expanded to it): each is stored once
    # along the batch and expanded by an op, so the trace records the batch sizes and the graph resizes.
    torch.manual_seed(0)
    config = transformers.T5Config(num_layers=2, num_decoder_layers=2, d_model=32, d_kv=8, num_heads=4, d_ff=64,
                                   vocab_size=64, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)
    model = transformers.T5ForConditionalGeneration(config)
    ids, labels = torch.randint(1, 64, (5, 12)), torch.randint(1, 64, (5, 7))
    files = {}
    for batch in (2, 5):
        graph = loom.trace(model, {"input_ids": ids[:batch], "decoder_input_ids": labels[:batch],
                                   "labels": labels[:batch]}, capture=capture)
        assert graph["sizes"]["symbols"] == {"batch": batch}
        assert not any("value" in t and batch in t["shape"] for t in graph["tensors"])  # no constant of the batch
        files[batch] = tmp_path / f"t5-b{batch}.json"
        loom.save_graph(graph, files[batch])
    resized, direct = tmp_path / "resized.json", tmp_path / "direct.json"
    a = run_loom("graph", "--from", str(files[2]), "--batch", "5", "--json", str(resized))
    b = run_loom("graph", "--from", str(files[5]), "--json", str(direct))
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert _structure(json.loads(resized.read_text())) == _structure(json.loads(direct.read_text()))
