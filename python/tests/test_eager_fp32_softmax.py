"""`--attention eager-fp32` computes in fp32 exactly where Megatron-LM v3.0.x does above 4096 keys: the ops a 16-bit
GPT's graph holds from the 16-bit scores to the probabilities dropout reads, run one by one through the runtime's
torch forms with the graph's dtypes, give bit for bit what Megatron's FusedScaleMaskSoftmax.forward_torch_softmax
gives from the same scores (megatron/model/fused_softmax.py: input_in_float16 and softmax_in_fp32, which query-key
layer scaling sets: `.float()`, times the layer-number coefficient, attention_mask_func's masked_fill_ of -10000,
torch.nn.Softmax, `.half()` / `.bfloat16()`), and q carries Megatron's baddbmm alpha 1 / (sqrt(d) x layer number).
The plain eager form softmaxes the 16-bit scores and does not.
"""

import json
import math

import pytest
import torch

from loom.runtime import forms
from loom.runtime.initial import DTYPES

HEAD_DIM = 64  # gpt3-125m: 12 heads of 64
LAYERS = 3


def graph(run_loom, tmp_path, dtype, attention):
    """The forward graph of a 3-layer gpt3-125m, seq 16: (ops by name, tensors by id)."""
    path = tmp_path / f"{attention}-{dtype}.json"
    result = run_loom("graph", "--model", "gpt3-125m", "--layers", str(LAYERS), "--seq", "16", "--batch", "2",
                      "--dtype", dtype, "--attention", attention, "--forward-only", "--json", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(path.read_text())
    return {op["name"]: op for op in document["ops"]}, {t["id"]: t for t in document["tensors"]}


def plain(attrs):
    """Graph-file attributes ({"factor": {"real": 2.0}}) as the runtime's forms take them ({"factor": 2.0})."""
    return {k: next(iter(v.values())) if isinstance(v, dict) and len(v) == 1 else v for k, v in attrs.items()}


def run_chain(ops, tensors, scope, scores):
    """The graph's ops from the scores (exclusive) to dropout (exclusive), each through its torch form."""
    x = scores
    for name in ("scores_fp32", "scores_scaled", "causal_mask", "probs", "probs_half"):
        op = ops.get(scope + name)
        if op is None:  # the plain eager form has no casts nor scores_scaled
            continue
        spec = [(tuple(tensors[i]["shape"]), DTYPES[tensors[i]["dtype"]]) for i in op["inputs"]]
        out = [(tuple(tensors[i]["shape"]), DTYPES[tensors[i]["dtype"]]) for i in op["outputs"]]
        (x,) = forms.build(op["type"], plain(op["attrs"]), spec, out)(x)
        assert x.dtype == out[0][1], name
    return x


def megatron_forward_torch_softmax(scores, coefficient):
    """Megatron-LM v3.0.x, FusedScaleMaskSoftmax.forward_torch_softmax with its GPT's causal mask (attention_mask =
    the upper triangle, attention_mask_func fills -10000.0), for 16-bit scores and softmax_in_fp32."""
    dtype = scores.dtype
    x = scores.float()
    x = x * coefficient
    s, t = x.shape[-2:]
    mask = torch.triu(torch.ones(s, t, dtype=torch.bool), diagonal=1)
    x = x.masked_fill_(mask, -10000.0)
    probs = torch.nn.Softmax(dim=-1)(x)
    return probs.half() if dtype == torch.float16 else probs.bfloat16()


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_softmax_runs_in_fp32_as_megatron_lm_above_4096_keys(dtype, run_loom, tmp_path):
    ops, tensors = graph(run_loom, tmp_path, dtype, "eager-fp32")
    eager_ops, eager_tensors = graph(run_loom, tmp_path, dtype, "eager")
    generator = torch.Generator().manual_seed(0)
    for layer in range(LAYERS):
        scope, coefficient = f"layers.{layer}.attn.", layer + 1
        scores_shape = tensors[ops[scope + "scores"]["outputs"][0]]["shape"]
        # 16-bit scores as baddbmm leaves them: q k^T / (sqrt(d) x coefficient), a few units wide
        scores = (torch.randn(scores_shape, generator=generator) * 3 / coefficient).to(DTYPES[dtype])
        want = megatron_forward_torch_softmax(scores.clone(), coefficient)
        got = run_chain(ops, tensors, scope, scores)
        assert got.dtype == want.dtype
        assert torch.equal(got, want), f"{scope}: max |diff| {(got.float() - want.float()).abs().max().item():.3e}"
        # Megatron's baddbmm alpha: q's scale is 1 / (sqrt(d) x layer number), the scores take the number back.
        q_factor = plain(ops[scope + "q_scaled"]["attrs"])["factor"]
        assert q_factor == pytest.approx(1 / (math.sqrt(HEAD_DIM) * coefficient), rel=1e-15)
        assert plain(ops[scope + "scores_scaled"]["attrs"])["factor"] == coefficient
        # The test has teeth: the eager form rounds the logits to 16 bits (its scores carry the whole scale),
        # which differs from Megatron's where the coefficient is no power of two (layer 3). torch's CPU softmax
        # of 16-bit input accumulates in fp32 and rounds once, so with exact logits the two forms agree.
        logits = (scores.float() * coefficient).to(DTYPES[dtype])
        eager = run_chain(eager_ops, eager_tensors, scope, logits)
        assert eager.dtype == want.dtype
        assert torch.equal(eager, want) == (coefficient != 3), scope
