"""Regressions the coverage report's match column found (issue 5): runtime forms and lowerings that trained
differently from one device.

    mean over a shard of its reduced dims    a value part: the shard's sum over the whole count (Phi-3, GLM,
                                             OLMoE, ConvNeXt V2 under tp: RMSNorm's mean over split hidden)
    conv2d of a shard of a grouped conv      the shard's own groups (depthwise convs of RecurrentGemma, PvtV2,
                                             Segformer crashed under tp: "Given groups=N, expected weight ...")
    F.normalize / torch.norm of a zero row   gradient 0, as torch's (Swin V2's padded windows gave NaN keys)
"""

import random

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import loom
from loom.runtime import forms
from loom.runtime.compute import SubOp


def spec(shape, offset=None, full=None, dtype="f32"):
    shape = list(shape)
    return {"shape": shape, "dtype": dtype, "offset": list(offset or [0] * len(shape)),
            "full": list(full or shape), "step": [1] * len(shape)}


def _cut(x, dim, parts):
    """[(offset, piece)] of x cut into `parts` near-equal pieces along dim."""
    bounds = [round(k * x.shape[dim] / parts) for k in range(parts + 1)]
    return [(a, x.narrow(dim, a, b - a)) for a, b in zip(bounds, bounds[1:]) if b > a]


def _mean_piece(x, dim, offset, piece, dims, keep):
    rank = x.dim()
    offsets = [0] * rank
    offsets[dim] = offset
    out_full = [1 if d in dims else n for d, n in enumerate(x.shape)] if keep else \
        [n for d, n in enumerate(x.shape) if d not in dims]
    form = forms.build_placed("mean", {"dims": [d - rank if d % 2 else d for d in dims], "keepdim": keep},
                            [spec(piece.shape, offsets, list(x.shape))], [spec(out_full)])
    return form(piece)[0]


def test_mean_over_shards_of_a_reduced_dim_gives_value_parts_that_add_up_to_the_mean():
    rng = random.Random(11)
    for _ in range(60):
        rank = rng.randint(1, 4)
        shape = [rng.randint(1, 6) for _ in range(rank)]
        x = torch.randn(shape, dtype=torch.float64)
        dims = sorted(rng.sample(range(rank), rng.randint(1, rank)))
        keep = rng.random() < 0.5
        want = torch.mean(x, dims, keepdim=keep)
        dim = rng.randrange(rank)
        pieces = _cut(x, dim, rng.randint(1, 3))
        got = [_mean_piece(x, dim, a, p, dims, keep) for a, p in pieces]
        if dim in dims:  # value parts of the whole mean
            torch.testing.assert_close(sum(got), want, rtol=1e-12, atol=1e-12)
        else:  # a split kept dim: each piece is the mean of its own rows
            where = dim if keep else dim - sum(1 for d in dims if d < dim)
            torch.testing.assert_close(torch.cat(got, where), want, rtol=1e-12, atol=1e-12)


def test_mean_of_a_shard_backward_is_the_gradient_of_its_value_part():
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    half = spec([2, 3, 4], [0, 0, 4], [2, 3, 8], "f64")
    out = spec([2, 3, 1], full=[2, 3, 1], dtype="f64")
    forward = {"type": "mean", "attrs": {"dims": [2], "keepdim": True}, "inputs": [half], "outputs": [out],
               "grad_inputs": [0], "grad_outputs": [0], "saved_inputs": True, "saved_outputs": False}
    backward = SubOp({"name": "mean.backward", "type": "mean", "attrs": forward["attrs"], "backward_of": forward,
                      "inputs": [], "outputs": [half]}, "cpu")
    g = torch.randn(2, 3, 1, dtype=torch.float64)
    (grad,) = backward(x[..., 4:], g)
    torch.testing.assert_close(grad, g.expand(2, 3, 4) / 8)  # 1 / the whole count, not the shard's


@pytest.mark.parametrize("channels,groups,parts", [(8, 8, 2), (8, 8, 8), (8, 4, 2), (12, 4, 4), (6, 2, 2)])
def test_conv2d_of_a_shard_of_whole_groups_is_the_slice_of_the_whole_conv(channels, groups, parts):
    torch.manual_seed(channels * groups + parts)
    x = torch.randn(2, channels, 5, 4, dtype=torch.float64)
    w = torch.randn(channels, channels // groups, 3, 3, dtype=torch.float64)
    b = torch.randn(channels, dtype=torch.float64)
    attrs = {"groups": groups, "padding": [1, 1]}
    whole = F.conv2d(x, w, b, padding=1, groups=groups)
    per = channels // parts
    for k in range(parts):
        cut = slice(k * per, (k + 1) * per)
        xs, ws, bs = x[:, cut], w[cut], b[cut]
        form = forms.build("conv2d", attrs, [(tuple(t.shape), t.dtype) for t in (xs, ws, bs)],
                         [((2, per, 5, 4), torch.float64)])
        torch.testing.assert_close(form(xs, ws, bs)[0], whole[:, cut])


class CosineKeys(nn.Module):
    """Swin V2's cosine attention: F.normalize of keys projected without a bias from rows that include a
    padded (zero) one."""

    def __init__(self):
        super().__init__()
        self.key = nn.Linear(4, 4, bias=False)

    def forward(self, x):
        return (F.normalize(self.key(x), dim=-1) * torch.arange(4.0)).sum()


class NormKeys(CosineKeys):
    """torch.norm of the same keys: its gradient at a zero row is 0 in torch (sqrt's is infinite)."""

    def forward(self, x):
        return (torch.norm(self.key(x), dim=-1) * torch.arange(3.0)).sum()


@pytest.mark.parametrize("model_type", [CosineKeys, NormKeys])
def test_norms_of_a_zero_row_have_torch_s_gradient_not_nan(model_type):
    torch.manual_seed(0)
    model = model_type()
    x = torch.randn(3, 4)
    x[1] = 0.0  # a padded window's row: its key is exactly zero
    graph = loom.trace(model, {"x": x}, loss=lambda out, batch: out)
    tensors = graph["tensors"]
    by_name = {t["name"]: t["id"] for t in tensors}
    weight = model.key.weight.detach().clone().requires_grad_(True)
    values = {by_name["x"]: x, by_name["key.weight"]: weight}
    for t in tensors:
        if t["role"] == "buffer":
            values[t["id"]] = torch.tensor([float(v) for v in t["value"]]).reshape(t["shape"])
    for op in graph["ops"]:
        shape_of = lambda i: (tuple(tensors[i]["shape"]), torch.float32)  # noqa: E731
        attrs = {k: float(v["real"]) if isinstance(v, dict) and "real" in v else v for k, v in op["attrs"].items()}
        form = forms.build(op["type"], attrs, [shape_of(i) for i in op["inputs"]],
                         [shape_of(i) for i in op["outputs"]])
        for i, out in zip(op["outputs"], form(*[values[i] for i in op["inputs"]])):
            values[i] = out
    loss = values[graph["loss"]]
    (got,) = torch.autograd.grad(loss, [weight])
    model(x).backward()
    torch.testing.assert_close(loss, model(x))
    assert not got.isnan().any()
    torch.testing.assert_close(got, model.key.weight.grad)
