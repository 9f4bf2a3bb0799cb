"""Losses over labels with ignored tokens (-100): torch's mean divides by the counted tokens, a whole-batch
number, which the capture makes a derived input of the graph (src/ir/derived_input.h) that the runtime counts
from the step's whole labels. A plain module with F.cross_entropy(ignore_index=-100) trains as torch trains it
under data parallelism, ZeRO with micro-batches and 1F1B / zero-bubble pipelines of 4 micro-batches (no
deadlock: no micro-batch waits for another's labels); its graph names the count as derived from the labels."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import loom
from loom.runtime.initial import counted_tokens, module_state
from loom.runtime.launch import load_manifest, train

RTOL = 1e-5
STEPS = 3
BATCH, FEATURES, CLASSES = 8, 12, 7
SGD = ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"]
PLANS = {
    "single": ["--policy", "dp", "--dp", "1", "--gpus", "1"],
    "dp2": ["--policy", "dp", "--dp", "2", "--gpus", "2"],
    "dp2-mb2": ["--policy", "dp", "--dp", "2", "--microbatches", "2", "--gpus", "2"],
    "zero2-mb2": ["--policy", "zero", "--dp", "2", "--zero", "2", "--microbatches", "2", "--gpus", "2"],
    "zero3": ["--policy", "zero", "--dp", "2", "--zero", "3", "--gpus", "2"],
    "pp2-1f1b": ["--policy", "megatron", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--gpus", "2"],
    "pp2-zbh1": ["--policy", "megatron", "--pp", "2", "--microbatches", "4", "--schedule", "zb-h1", "--gpus", "2"],
}


class Tagger(nn.Module):
    """Four linear layers tagging each of a batch of tokens; the loss torch's mean over the labels not -100."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(FEATURES, FEATURES) for _ in range(3))
        self.head = nn.Linear(FEATURES, CLASSES)

    def forward(self, x, labels):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return F.cross_entropy(self.head(x), labels, ignore_index=-100)


def make_batches():
    """STEPS batches whose labels ignore 1, 3 and 5 tokens, unevenly over the batch (micro-batches differ)."""
    generator = torch.Generator().manual_seed(3)
    batches = []
    for step in range(STEPS):
        x = torch.randn(BATCH, FEATURES, generator=generator)
        labels = torch.randint(0, CLASSES, (BATCH,), generator=generator)
        labels[torch.randperm(BATCH, generator=generator)[: 2 * step + 1]] = -100
        batches.append({"x": x, "labels": labels})
    return batches


def torch_training(model, batches):
    reference = copy.deepcopy(model)
    sgd = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9, foreach=False)
    losses = []
    for batch in batches:
        loss = reference(**batch)
        losses.append(loss.item())
        loss.backward()
        sgd.step()
        sgd.zero_grad()
    return losses, {n: p.detach().clone() for n, p in reference.named_parameters()}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    torch.manual_seed(0)
    model, batches = Tagger(), make_batches()
    path = tmp_path_factory.mktemp("tagger") / "tagger.json"
    graph = loom.trace(model, batches[0])
    loom.save_graph(graph, path)
    return model, batches, graph, path, torch_training(model, batches)


def test_the_count_is_an_input_derived_from_the_labels(traced):
    _, _, graph, _, _ = traced
    tensors = graph["tensors"]
    labels = next(t for t in tensors if t["name"] == "labels")
    derived = [t for t in tensors if "derived" in t]
    assert [t["name"] for t in derived] == ["labels.counted_tokens"]
    assert derived[0]["role"] == "input" and derived[0]["shape"] == [] and derived[0]["dtype"] == "f32"
    assert derived[0]["derived"] == {"from": labels["id"], "kind": "counted_tokens", "ignore_index": -100}
    loss = next(op for op in graph["ops"] if op["type"] == "cross_entropy")
    assert loss["inputs"][1:] == [labels["id"], derived[0]["id"]]
    assert graph["sizes"]["symbols"] == {"batch": BATCH}  # a scalar: nothing to resize


def test_the_runtime_counts_the_window_of_the_whole_labels():
    labels = torch.tensor([[-100, 1, 2, -100], [3, -100, 4, 5]])
    assert counted_tokens(labels, {"kind": "counted_tokens", "ignore_index": -100}).item() == 5
    shifted = {"kind": "counted_tokens", "ignore_index": -100, "trim": [[0, 0], [1, 0]]}
    assert counted_tokens(labels, shifted).item() == 4  # each row's first label dropped (a causal LM's shift)


@pytest.mark.parametrize("plan", list(PLANS))
def test_plan_trains_as_torch_with_ignored_tokens(plan, traced, run_loom, tmp_path):
    model, batches, _, path, (want_losses, want) = traced
    result = run_loom("plan", "--graph", str(path), "--dtype", "f32", *PLANS[plan], *SGD,
                      "--out", str(tmp_path / "out"), "--emit", str(tmp_path / "emit"))
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = load_manifest(tmp_path / "emit")
    losses, values = train(tmp_path / "emit", STEPS, initial=module_state(model, manifest), batches=batches,
                           timeout=120)
    loss_rel = max(abs(a - b) / abs(b) for a, b in zip(losses, want_losses))
    worst = max((values[n + ".updated"].double().reshape(w.shape) - w.double()).abs().max().item()
                / w.abs().max().item() for n, w in want.items())
    print(f"tagger {plan}: losses {' '.join(f'{x:.8g}' for x in losses)} (max rel {loss_rel:.2e}); "
          f"worst parameter rel {worst:.2e}")
    assert loss_rel <= RTOL
    assert worst <= RTOL

