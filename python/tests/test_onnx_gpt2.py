"""A small GPT-2 from transformers exported with torch.onnx (the TorchScript exporter, dynamo=False, opset 17,
the forward returning the loss), read by the engine's ONNX reader (docs/onnx.md): planned and verified with dp 2
and tp 2, and compared with the same model traced by loom.trace.

On transformers 5 the model is called as the exporter can write it (docs/onnx.md, "Exporting"): with an attention
mask of ones (without one, 5.x looks for packed sequences in the position ids with torch.diff, which the
TorchScript exporter has no symbolic for at any opset) and eager attention (the exporter writes 5.x's default,
scaled_dot_product_attention, with an IsNaN guard for fully masked rows). transformers 5 pads the labels with
-100 before its shift: the reader maps that Pad."""

import re

import pytest
import torch

import loom

transformers = pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")  # torch.onnx.export writes through it (python/requirements.txt)

BATCH, SEQ = 2, 16


class WithLoss(torch.nn.Module):
    """The language model whose forward returns its loss: the ONNX graph's one output."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        mask = torch.ones_like(input_ids)
        return self.model(input_ids=input_ids, attention_mask=mask, labels=labels, use_cache=False).loss


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32,
                                     attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 128, (BATCH, SEQ))
    directory = tmp_path_factory.mktemp("onnx_gpt2")
    onnx_path = directory / "gpt2.onnx"
    # do_constant_folding=False keeps lm_head's tie to wte as a Transpose of the one weight (folding would
    # write the transposed copy as a second initializer).
    torch.onnx.export(WithLoss(model), (ids, ids), str(onnx_path), dynamo=False, opset_version=17,
                      input_names=["input_ids", "labels"], output_names=["loss"], do_constant_folding=False)
    traced_path = directory / "traced.json"
    loom.save_graph(loom.trace(model, {"input_ids": ids, "labels": ids}), traced_path)
    return str(onnx_path), str(traced_path), sum(p.numel() for p in model.parameters())


def summary(run_loom, path):
    """`loom graph --from PATH --forward-only`: (forward ops, forward FLOPs, parameters)."""
    result = run_loom("graph", "--from", path, "--forward-only")
    assert result.returncode == 0, result.stderr
    ops = int(re.search(r"forward\s+(\d+) ops", result.stdout).group(1))
    flops = float(re.search(r"FLOPs per step \(([0-9.e+]+)\)", result.stdout).group(1))
    params = int(re.search(r"parameters\s+\S+ \((\d+)\)", result.stdout.replace(",", "")).group(1))
    return ops, flops, params


def test_the_onnx_graph_has_the_traced_graphs_parameters_and_flops(gpt2, run_loom):
    onnx_path, traced_path, model_params = gpt2
    onnx_ops, onnx_flops, onnx_params = summary(run_loom, onnx_path)
    traced_ops, traced_flops, traced_params = summary(run_loom, traced_path)
    assert onnx_params == traced_params == model_params
    # The exporter and the tracer write attention's scaling and mask, the fused qkv projection and the tied lm_head
    # in different ops (docs/onnx.md, "Compared with the traced graph"): a few ops a layer apart.
    assert abs(onnx_flops - traced_flops) <= 0.02 * traced_flops, (onnx_flops, traced_flops)
    assert abs(onnx_ops - traced_ops) <= 0.2 * traced_ops, (onnx_ops, traced_ops)


def test_op_names_keep_the_onnx_module_paths(gpt2, run_loom, tmp_path):
    result = run_loom("graph", "--from", gpt2[0], "--forward-only", "--json", str(tmp_path / "g.json"))
    assert result.returncode == 0, result.stderr
    names = (tmp_path / "g.json").read_text()
    assert '"model.transformer.h.1.attn.Softmax"' in names
    assert '"model.transformer.h.0.mlp.c_fc.Gemm"' in names


@pytest.mark.parametrize("policy", [["--policy", "dp", "--dp", "2"], ["--policy", "tp", "--tp", "2"]])
def test_loom_plans_and_verifies_the_onnx_gpt2(gpt2, run_loom, tmp_path, policy):
    planned = run_loom("plan", "--graph", gpt2[0], *policy, "--gpus", "2", "--out", str(tmp_path / "out"))
    assert planned.returncode == 0, planned.stderr
    step = re.search(r"step time\s+([0-9.]+) (us|ms|s)\b", planned.stdout)
    assert step and float(step.group(1)) > 0, planned.stdout
    verified = run_loom("verify", "--graph", gpt2[0], *policy, "--gpus", "2")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert re.search(r"result\s+PASS", verified.stdout), verified.stdout


def edited(gpt2, tmp_path, edit):
    model = onnx.load(gpt2[0])
    edit(model)
    path = tmp_path / "edited.onnx"
    onnx.save(model, str(path))
    return str(path)


def test_bad_files_are_errors_naming_the_file_and_the_fix(gpt2, run_loom, tmp_path):
    data = open(gpt2[0], "rb").read()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    for path, message, hint in [
        (str(tmp_path), "cannot read the graph file: it is a directory", "regular files only"),
        (str(tmp_path / "missing.onnx"), "cannot read the ONNX model: no such file", "check the path"),
        (str(cut), "not a readable ONNX model", "export it again"),
    ]:
        result = run_loom("plan", "--graph", path, "--policy", "dp", "--gpus", "2")
        assert result.returncode != 0
        assert f"loom: error: {path}: {message}" in result.stderr, result.stderr
        assert hint is None or hint in result.stderr, result.stderr


def test_an_opset_not_understood_is_refused(gpt2, run_loom, tmp_path):
    path = edited(gpt2, tmp_path, lambda m: m.opset_import[0].__setattr__("version", 9))
    result = run_loom("graph", "--from", path)
    assert result.returncode != 0
    assert "opset 9 is not understood" in result.stderr and "opset_version=17" in result.stderr, result.stderr


def test_unknown_ops_are_listed_together(gpt2, run_loom, tmp_path):
    def rename(model):
        for node in model.graph.node:
            if node.op_type in ("Tanh", "Softmax"):
                node.op_type = "My" + node.op_type
    result = run_loom("graph", "--from", edited(gpt2, tmp_path, rename))
    assert result.returncode != 0
    assert "MySoftmax x2 (e.g. node 'model.transformer.h.0.attn.Softmax')" in result.stderr, result.stderr
    assert "MyTanh x2" in result.stderr and "loom.register_op" in result.stderr, result.stderr


def test_a_symbolic_dim_needs_a_size(gpt2, run_loom, tmp_path):
    def symbolic_batch(model):
        for graph_input in model.graph.input:
            graph_input.type.tensor_type.shape.dim[0].dim_param = "batch"
    path = edited(gpt2, tmp_path, symbolic_batch)
    refused = run_loom("graph", "--from", path)
    assert refused.returncode != 0
    assert "input 'input_ids' has the symbolic size 'batch' at dim 0" in refused.stderr, refused.stderr
    assert "--onnx-dim batch=N" in refused.stderr, refused.stderr
    sized = run_loom("graph", "--from", path, "--onnx-dim", f"batch={BATCH}")
    assert sized.returncode == 0, sized.stderr
