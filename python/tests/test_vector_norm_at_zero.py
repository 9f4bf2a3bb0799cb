"""A vector norm of a zero vector on the export route: F.normalize of keys that are zero where the input rows are
(Swin V2's zero-padded windows through a key projection without bias). torch's norm has gradient 0 there; spelled
as sqrt(sum(x^2)) it was inf x 0 = NaN, in every key weight (Swinv2ForImageClassification's --match). One SGD step
of the traced graph (1 device, and dp 2 / tp 2 against it) equals torch's step."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import loom
from loom.coverage_engine import SINGLE, run_plan
from loom.coverage_match import MATCH_STEP, check_match
from loom.runtime.initial import module_state
from loom.runtime.launch import load_manifest, train

RTOL = 1e-5


class CosineAttention(nn.Module):
    """Swin V2's cosine attention over token rows of which those of id 0 are zero (padding)."""

    def __init__(self, vocab=20, hidden=16, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.value = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids, labels):
        x = self.embed(ids) * (ids != 0)[..., None].float()  # padded rows are zero
        q, k = F.normalize(self.query(x), dim=-1), F.normalize(self.key(x), dim=-1)
        probs = torch.softmax(10.0 * q @ k.transpose(-1, -2), dim=-1)
        out = probs @ self.value(x) + torch.linalg.vector_norm(k, dim=-1, keepdim=True)  # the norm's value, too
        return F.cross_entropy(self.head(out).flatten(0, 1), labels.flatten())


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    torch.manual_seed(0)
    model = CosineAttention()
    g = torch.Generator().manual_seed(1)
    batch = {"ids": torch.randint(1, 20, (4, 6), generator=g), "labels": torch.randint(0, 5, (4, 6), generator=g)}
    batch["ids"][:, -2:] = 0  # the last two rows of every sequence padded
    path = tmp_path_factory.mktemp("norm") / "graph.json"
    loom.save_graph(loom.trace(model, batch, capture="export", loss=lambda out, batch: out), path)
    return model, batch, path


def test_the_one_device_step_equals_torchs(case, loom_binary, tmp_path):
    model, batch, path = case
    reference = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(**batch).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    want = {n: reference[n] - p.grad for n, p in model.named_parameters()}  # SGD, learning rate 1
    emit = tmp_path / "emit"
    result = run_plan(loom_binary, str(path), SINGLE + MATCH_STEP, str(tmp_path / "out"), 120, str(emit))
    assert result.returncode == 0, result.stderr
    _, values = train(emit, 1, initial=module_state(model, load_manifest(emit)), batches=[batch], timeout=120)
    for name, w in want.items():
        got = values[name + ".updated"].reshape(w.shape)
        assert torch.isfinite(got).all(), f"{name}: not finite"
        rel = (got - w).abs().max().item() / w.abs().max().item()
        assert rel <= RTOL, f"{name}: relative error {rel:.2e}"


def test_dp_and_tp_steps_equal_the_one_device_step(case, loom_binary, tmp_path):
    _, _, path = case
    assert check_match(loom_binary, str(path), str(tmp_path), "norm", timeout=120) == ""
