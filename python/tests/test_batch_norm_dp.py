"""Batch norm under data parallelism trains as one device (issue 5): a small CNN with BatchNorm2d and
BatchNorm1d in training mode is traced (batch norm becomes the engine's batch-splittable parts: per-channel
sums over batch and space, all-reduced by the plan, then the normalization: SyncBatchNorm's statistics),
planned on 1 device and with the batch split 2 ways, and trained one SGD step on gloo from the module's own
weights. The loss and every updated parameter equal torch's own training of the module on the whole
batch (float32, rtol 1e-5 of each tensor's largest value), and the dp plan does split the batch norm.
Normalizing each half with its own statistics (DDP without SyncBatchNorm) would fail the same check.
Both capture routes: torch.fx, and torch.export, whose graph lists the running statistics as buffer mutations.
"""

import copy
import json
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import loom
from loom.runtime.initial import module_state
from loom.runtime.launch import load_manifest, train

RTOL = 1e-5
LR = 0.1
BATCH = 8


class BatchNormCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(8, eps=1e-3)
        self.fc1 = nn.Linear(8, 16)
        self.bn3 = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = F.relu(self.bn3(self.fc1(h.mean((2, 3)))))
        return self.fc2(h)


def loss_fn(out, batch):
    return F.cross_entropy(out, batch["y"])


@pytest.fixture(scope="module", params=["fx", "export"])
def setup(tmp_path_factory, request):
    torch.manual_seed(0)
    module = BatchNormCNN().train()
    # Per-channel offsets and scales, so the statistics matter (and differ between halves of the batch).
    x = torch.randn(BATCH, 3, 8, 8) * torch.tensor([1.0, 2.0, 0.5]).view(1, 3, 1, 1) + 0.5
    batch = {"x": x, "y": torch.randint(0, 10, (BATCH,), generator=torch.Generator().manual_seed(2))}
    path = tmp_path_factory.mktemp("bn") / "cnn.json"
    graph = loom.trace(module, batch, loss=loss_fn, capture=request.param)
    loom.save_graph(graph, path)
    return module, batch, graph, path


def torch_step(module, batch):
    """torch's own SGD step on the whole batch: (loss, {name: updated value}, {name: running statistic})."""
    reference = copy.deepcopy(module)
    optim = torch.optim.SGD(reference.parameters(), lr=LR)
    loss = loss_fn(reference(batch["x"]), batch)
    loss.backward()
    optim.step()
    running = {n: b.clone() for n, b in reference.named_buffers() if ".running_" in n or "num_batches" in n}
    return loss.item(), {n: p.detach().clone() for n, p in reference.named_parameters()}, running


def worst(values, want):
    """(max over tensors of max |diff| / max |want|, its name)."""
    errors = [((values[n].double().reshape(w.shape) - w.double()).abs().max().item() / w.abs().max().item(), n)
              for n, w in want.items()]
    return max(errors)


def test_training_batch_norm_traces_to_the_parts(setup):
    module, _, graph, _ = setup
    types = [op["type"] for op in graph["ops"]]
    assert "batch_norm" not in types
    assert types.count("batch_norm_sums") == 3 and types.count("batch_norm_from_sums") == 3
    # The running statistics: buffers the step writes next versions of (torch's momentum update) ...
    tensors = {t["id"]: t for t in graph["tensors"]}
    updated = sorted(tensors[t["updates"]]["name"] for t in graph["tensors"] if "updates" in t)
    kinds = ("running_mean", "running_var", "num_batches_tracked")
    assert updated == sorted(f"bn{k}.{s}" for k in (1, 2, 3) for s in kinds)
    # ... starting from the module's own, which tracing left as they were (its recording run updated them).
    for name, b in module.named_buffers():
        if ".running_" in name:
            assert torch.equal(b, torch.zeros_like(b) if name.endswith("mean") else torch.ones_like(b)), name


@pytest.mark.parametrize("plan", [["--policy", "dp", "--dp", "1", "--gpus", "1"], ["--policy", "dp", "--dp", "2", "--gpus", "2"]],
                         ids=["single", "dp2"])
def test_plan_trains_as_torch(setup, plan, run_loom, tmp_path):
    module, batch, _, path = setup
    result = run_loom("plan", "--graph", str(path), "--dtype", "f32", *plan, "--optimizer", "sgd", "--lr", str(LR),
                      "--out", str(tmp_path / "out"), "--emit", str(tmp_path / "emit"))
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = load_manifest(tmp_path / "emit")
    losses, values = train(tmp_path / "emit", 1, initial=module_state(module, manifest), batches=[batch], timeout=120)
    want_loss, want, running = torch_step(module, batch)
    rel, where = worst({n: values[n + ".updated"] for n in want}, want)
    print(f"{plan[-1]} device(s): loss {losses[0]:.8g} vs torch {want_loss:.8g}; worst parameter rel {rel:.2e} ({where})")
    assert abs(losses[0] - want_loss) <= RTOL * abs(want_loss)
    assert rel <= RTOL, f"{where}: relative error {rel:.3e}"
    rel, where = worst({n: values[n + ".updated"] for n in running}, running)  # the running statistics too
    assert rel <= RTOL, f"{where}: relative error {rel:.3e}"


def test_dp_plan_splits_the_batch_norm(setup, run_loom, tmp_path):
    # Each of the two ranks normalizes half of the batch: the parts run on [BATCH / 2, ...] shards.
    _, _, graph, path = setup
    result = run_loom("plan", "--graph", str(path), "--dtype", "f32", "--policy", "dp", "--dp", "2",
                      "--gpus", "2", "--out", str(tmp_path / "out"), "--emit", str(tmp_path / "emit"))
    assert result.returncode == 0, result.stdout + result.stderr
    sub_ops = json.loads((tmp_path / "emit" / "manifest.json").read_text())["sub_ops"].values()
    parts = [s for s in sub_ops if s.get("type", "").startswith("batch_norm")]
    assert {s["type"] for s in parts} == {"batch_norm_sums", "batch_norm_centered_sums", "batch_norm_from_sums"}
    for s in parts:
        x = s["inputs"][0]
        assert x["shape"][0] * 2 == x["full"][0] == BATCH, s["name"]
    # The per-channel statistics (sum, count, centered squares) are all-reduced before the normalization (bn1's:
    # its ops are the first; the program names a tensor as a Python identifier, src/codegen/buffer_names.cc).
    program = (tmp_path / "emit" / "rank_0.py").read_text()
    names = {t["id"]: t["name"] for t in graph["tensors"]}
    sums, squares = (next(op for op in graph["ops"] if op["type"] == kind)
                     for kind in ("batch_norm_sums", "batch_norm_centered_sums"))
    stats = [re.sub(r"\W", "_", names[t]) for t in [*sums["outputs"], *squares["outputs"]]]
    assert stats[0].startswith("bn1") and len(stats) == 3
    for stat in stats:
        assert f"rt.all_reduce({stat}_" in program, stat


@pytest.mark.parametrize("policy", [["--policy", "dp", "--dp", "2", "--microbatches", "2", "--gpus", "2"],
                                    ["--policy", "pp", "--pp", "2", "--microbatches", "2", "--gpus", "2"]])
def test_micro_batches_over_batch_norm_are_refused_naming_it(setup, run_loom, tmp_path, policy):
    # Micro-batches run one after another; whole-batch statistics would need them all at once.
    _, _, _, path = setup
    result = run_loom("plan", "--graph", str(path), "--dtype", "f32", *policy, "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert "sums over the whole batch" in result.stderr and "batch_norm_sums" in result.stderr, result.stderr
    assert "use 1 micro-batch" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_per_shard_statistics_would_fail(setup):
    # Teeth: DDP without SyncBatchNorm (each half normalized with its own statistics, gradients averaged)
    # differs from whole-batch training by far more than RTOL.
    module, batch, _, _ = setup
    _, want, _ = torch_step(module, batch)
    replica = copy.deepcopy(module)
    optim = torch.optim.SGD(replica.parameters(), lr=LR)
    half = BATCH // 2
    for part in (slice(0, half), slice(half, BATCH)):
        (loss_fn(replica(batch["x"][part]), {"y": batch["y"][part]}) / 2).backward()
    optim.step()
    rel, _ = worst({n: p.detach() for n, p in replica.named_parameters()}, want)
    assert rel > 100 * RTOL


def test_parallelize_returns_the_running_statistics_in_its_state_dict(setup):
    """loom.parallelize on one process: after a step its state_dict holds torch's new running statistics."""
    import loom.api

    if loom.api._loom_engine is None:
        pytest.skip("the engine's Python extension is not built")

    module, batch, _, _ = setup
    parallel = loom.api.parallelize(copy.deepcopy(module), batch, policy="dp", optimizer={"kind": "sgd", "lr": LR},
                                    loss=loss_fn)
    parallel.train_step(batch)
    _, _, running = torch_step(module, batch)
    trained = parallel.state_dict()
    rel, where = worst({n: trained[n] for n in running}, running)
    assert rel <= RTOL, f"{where}: relative error {rel:.3e}"
