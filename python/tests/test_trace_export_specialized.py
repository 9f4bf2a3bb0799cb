"""Capture specialized to the examples (capture="export"): a branch or a size that depends on tensor values
is decided by the examples' own (export_capture.py), and boolean masks whose count of true elements is a size
are lowered with that count (lowering/aten_masked.py): BART's `h[ids == eos]`, DeBERTa's `nonzero(labels >= 0)`,
X-MOD's `out[lang] = adapter(h[lang])`, FSMT's `if (ids == pad).any()`. Views that pick elements by position
(lowering/aten_strided.py): Longformer's overlapping chunks (as_strided of a transposed tensor), unfold, flip, and F.fold of
non-overlapping patches (MobileViT V2).
Each graph computes the module's loss; one SGD step of dp 2 and tp 2 plans equals the 1-device step."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_trace_lowered_values import assert_computes_the_loss, evaluate, loss_of, train_mismatch

import loom
from loom import coverage_inputs

EOS, PAD = 2, 1


class MaskedPicks(nn.Module):
    """A classifier reading each row's last end-of-sentence token (BART), adapters applied to the rows of
    one language and written back (X-MOD) and a loss over the labels that are kept (DeBERTa)."""

    def __init__(self, vocab=20, hidden=8, classes=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.adapter = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids, lang, labels):
        h = self.embed(ids)  # [b s d]
        rows = lang[:, None].expand(ids.shape) == 1  # [b s]: the rows of language 1
        out = torch.zeros_like(h)
        out[rows] = torch.tanh(self.adapter(h[rows]))  # one row per true element, written back
        h = h + out
        picked = h[ids == EOS].view(h.shape[0], -1, h.shape[-1])[:, -1, :]  # [b d]
        logits = self.head(picked)
        kept = torch.nonzero(labels >= 0).view(-1)  # [count]
        return F.cross_entropy(logits.index_select(0, kept), labels.index_select(0, kept))


def _masked_batch(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 20, (4, 6), generator=g)
    ids[:, -1] = EOS
    ids[1, 2] = EOS  # two end tokens in every row: the last is read
    ids[0, 3], ids[2, 1], ids[3, 4] = EOS, EOS, EOS
    return {"ids": ids, "lang": torch.tensor([1, 0, 1, 1]), "labels": torch.tensor([0, 2, -1, 1])}


@pytest.fixture(scope="module")
def masked():
    torch.manual_seed(0)
    model = MaskedPicks()
    batch = _masked_batch(0)
    return model, loom.trace(model, batch, capture="export", batch_dim=None), batch


def test_data_dependent_sizes_are_the_examples_and_lowered_with_registry_ops(masked):
    _, graph, _ = masked
    types = {op["type"] for op in graph["ops"]}
    assert {"cumsum", "le", "index_select", "where"} <= types
    head = next(op for op in graph["ops"] if op["name"].startswith("head"))
    assert graph["tensors"][head["inputs"][0]]["shape"] == [4, 8]
    kept = [t for t in graph["tensors"] if t["dtype"] == "i64" and t["shape"] == [3]]  # 3 labels of 4 are kept
    assert kept


def test_the_graph_computes_the_modules_loss_on_batches_with_the_examples_counts(masked):
    model, graph, batch = masked
    other = _masked_batch(1)  # other tokens and positions, as many end tokens, language rows and kept labels
    for inputs in (batch, other):
        assert_computes_the_loss(graph, model, inputs, rel_tol=1e-6)


def test_dp_and_tp_steps_equal_the_one_device_step(masked, loom_binary, tmp_path):
    _, graph, _ = masked
    assert train_mismatch(graph, loom_binary, tmp_path, "masked") == ""


class Branches(nn.Module):
    """A branch on whether any padding is present (FSMT), statistics read through `.data` and a check that
    none is NaN (I-BERT): the checks read the weights' values."""

    def __init__(self, vocab=20, hidden=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, ids):
        h = self.embed(ids)
        if (ids == PAD).any():  # a branch on the data: the examples decide it
            h = h * 2.0
        peak = h.data.abs().max()  # read as h.detach(): export would take h.data for a constant
        assert not peak.isnan(), "NaN in the activations"  # decided on the weights' values
        if peak > 1e3:  # so is this branch (not taken)
            h = h * 0.0
        return (self.head(h) ** 2).mean() + 1e-3 * peak


@pytest.mark.parametrize("pad", [True, False])
def test_a_branch_on_the_data_takes_the_examples_side(pad):
    torch.manual_seed(0)
    model = Branches()
    ids = torch.randint(2, 20, (3, 5), generator=torch.Generator().manual_seed(1))
    if pad:
        ids[1, 4] = PAD
    graph = loom.trace(model, {"ids": ids}, capture="export", batch_dim=None)
    types = [op["type"] for op in graph["ops"]]
    assert types.count("scale") == (2 if pad else 1)  # h * 2 on the padded side; 1e-3 * peak on both
    assert_computes_the_loss(graph, model, {"ids": ids}, rel_tol=1e-6)


def test_a_branch_on_the_data_of_a_model_on_meta_is_refused_naming_the_fix():
    with torch.device("meta"):
        model = Branches()
    ids = torch.randint(2, 20, (3, 5))
    with pytest.raises(ValueError, match="meta device.*weights on the CPU"):
        loom.trace(model, {"ids": ids}, capture="export", batch_dim=None)


class StridedViews(nn.Module):
    """Longformer's overlapping chunks (as_strided of a view of a transposed tensor), sliding windows
    (unfold) and a reversed sequence (flip)."""

    def __init__(self, hidden=4):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x):  # [s b d]
        h = self.proj(x).transpose(0, 1)  # [b s d], strides of [s b d]
        b, s, d = h.shape
        h = h.reshape(b * 1, s, d).view(b, s // 4, 4, d)  # chunks of 4 (a view of the transposed storage)
        size, stride = list(h.size()), list(h.stride())
        size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2  # chunks of 4 overlapping by 2
        chunks = h.as_strided(size=size, stride=stride)
        windows = x.unfold(0, 3, 2)  # [w b d 3]
        return (chunks ** 2).sum() + (windows * torch.arange(3.0)).sum() + (x.flip(0, 2)[0] * x[0]).sum()


def test_strided_views_compute_the_modules_loss_and_train_alike(loom_binary, tmp_path):
    torch.manual_seed(0)
    model, inputs = StridedViews(), {"x": torch.randn(8, 2, 4)}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export", batch_dim=None)
    assert not {"as_strided", "unfold", "flip"} & {op["type"] for op in graph["ops"]}
    windows = next(op for op in graph["ops"] if op["name"].endswith("unfold.windows"))
    assert windows["type"] == "index_select" and windows["attrs"]["dim"] == 0  # x's other dims kept: they split
    assert_computes_the_loss(graph, model, inputs, rel_tol=1e-6)
    assert train_mismatch(graph, loom_binary, tmp_path, "strided") == ""


class Patches(nn.Module):
    """MobileViT V2's patches folded back into an image (F.fold of non-overlapping 2x2 patches: an index_put
    accumulating at constant positions, each written once)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):  # [b, c*2*2, patches] of a 4x6 image
        patches = self.proj(x.transpose(1, 2)).transpose(1, 2)
        image = F.fold(patches, output_size=(4, 6), kernel_size=2, stride=2)
        return (image ** 2 * torch.arange(24.0).view(4, 6)).sum()


def test_folded_patches_compute_the_modules_loss_and_train_alike(loom_binary, tmp_path):
    torch.manual_seed(0)
    model, inputs = Patches(), {"x": torch.randn(2, 4, 6)}
    graph = loom.trace(model, inputs, loss=lambda out, batch: out, capture="export", batch_dim=None)
    assert "index_select" in {op["type"] for op in graph["ops"]}
    assert_computes_the_loss(graph, model, inputs, rel_tol=1e-6)
    assert train_mismatch(graph, loom_binary, tmp_path, "patches") == ""


@pytest.mark.parametrize("family,name", [("sequence-classification", "BartForSequenceClassification"),
                                         ("masked-lm", "XmodForMaskedLM"),
                                         ("seq2seq-lm", "FSMTForConditionalGeneration"),
                                         ("sequence-classification", "DebertaV2ForSequenceClassification")])
def test_transformers_classes_with_data_dependent_sizes_trace_and_compute_their_loss(family, name):
    pytest.importorskip("transformers")
    model, inputs, loss = coverage_inputs.build_with_inputs(family, name)
    model.eval()  # no dropout: the loss is compared
    if "eos_token_id" in model.config and name.startswith("Bart"):
        inputs["input_ids"][:, -1] = model.config.eos_token_id  # BART classifies at each row's last <eos>
    graph = loom.trace(model, inputs, loss=loss, capture="export", batch_dim=None)
    with torch.no_grad():
        out = model(**inputs)
        want = (out.loss if loss is None else loss(out, inputs)).item()
    assert math.isclose(loss_of(graph, evaluate(graph, model, inputs)), want, rel_tol=1e-5)
