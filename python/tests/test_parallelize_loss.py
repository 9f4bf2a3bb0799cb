"""loom.parallelize's loss: a model returning (logits, loss) or a ModelOutput, a model returning logits with a
loss function (loss=), each trained two steps equal to torch's AdamW on the same module; outputs whose loss is
ambiguous or missing are errors asking for loss=; keywords parallelize does not know are refused, those close
to its own before the trace."""

import copy
import json
import subprocess

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

RTOL = 1e-5
OPTIMIZER = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


class Classifier(nn.Module):
    """Two linear layers; `returns` picks what forward gives back (with y, the loss too)."""

    def __init__(self, returns):
        super().__init__()
        self.up, self.down = nn.Linear(8, 16), nn.Linear(16, 5)
        self.returns = returns

    def forward(self, x, y=None):
        logits = self.down(F.gelu(self.up(x)))
        if self.returns == "logits":
            return logits
        loss = F.cross_entropy(logits, y)
        if self.returns == "logits, loss":
            return logits, loss
        if self.returns == "model output":
            from transformers.modeling_outputs import CausalLMOutput

            return CausalLMOutput(loss=loss, logits=logits)
        return logits, loss, (logits * logits).mean()  # "two scalars"


def cross_entropy(outputs, batch):
    return F.cross_entropy(outputs, batch["y"])


def batches(n=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"x": torch.randn(6, 8, generator=g), "y": torch.randint(0, 5, (6,), generator=g)} for _ in range(n)]


def torch_losses(model, steps, loss_of):
    """torch's own training: one AdamW step per batch, the loss `loss_of(outputs, batch)` of each."""
    adamw = torch.optim.AdamW(model.parameters(), **OPTIMIZER)
    losses = []
    for batch in steps:
        adamw.zero_grad()
        outputs = model(batch["x"]) if model.returns == "logits" else model(batch["x"], batch["y"])
        loss = loss_of(outputs, batch)
        loss.backward()
        adamw.step()
        losses.append(loss.item())
    return losses


def the_loss(outputs, batch):
    """What a model returning its loss returns it as: a ModelOutput's .loss, a tuple's only scalar."""
    return outputs.loss if hasattr(outputs, "loss") else outputs[1]


@pytest.mark.parametrize("returns, loss", [("logits, loss", None), ("model output", None), ("logits", cross_entropy)])
def test_parallelize_trains_the_loss_as_torch(engine, returns, loss):
    torch.manual_seed(0)
    model = Classifier(returns)
    reference = copy.deepcopy(model)
    steps = batches()
    parallel = engine.parallelize(model, steps[0], policy="dp", world_size=1, optimizer=OPTIMIZER, loss=loss)
    losses = [parallel.train_step(b) for b in steps]
    assert losses == pytest.approx(torch_losses(reference, steps, loss or the_loss), rel=RTOL)
    trained = parallel.state_dict()
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(trained[name], value, rtol=1e-4, atol=1e-6, msg=name)


def test_a_model_with_several_scalars_or_none_asks_for_loss(engine):
    steps = batches(1)
    with pytest.raises(ValueError, match=r"returns 2 scalars \(outputs\[1\], outputs\[2\]\).*pass loss="):
        engine.parallelize(Classifier("two scalars"), steps[0], policy="dp")
    with pytest.raises(ValueError, match="returns no scalar loss.*pass loss="):
        engine.parallelize(Classifier("logits"), steps[0], policy="dp")
    # loss= settles it: the third output, the mean square, is a loss as good as any.
    parallel = engine.parallelize(Classifier("two scalars"), steps[0], policy="dp", loss=lambda out, b: out[2])
    assert parallel.train_step(steps[0]) > 0


class Untraceable(nn.Module):
    """A forward that fails: a keyword refused before the trace never reaches it."""

    def forward(self, x):
        raise AssertionError("traced")


@pytest.mark.parametrize("keywords, message", [
    ({"microbatch": 2}, "unexpected keyword argument 'microbatch'; did you mean 'microbatches'?"),
    ({"optimiser": {}}, "unexpected keyword argument 'optimiser'; did you mean 'optimizer'?"),
    ({"micro_batches": 2}, "sets the engine's 'micro_batches' itself: give microbatches="),
    ({"gpus": 4}, "sets the engine's 'gpus' itself: the world size is torch.distributed's"),
    ({"optimizer": {"lr": 1e-3}, "lr": 1e-2}, "got 'lr' twice, as a keyword and in optimizer="),
])
def test_parallelize_refuses_its_misspelt_keywords_before_tracing(engine, keywords, message):
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace("?", r"\?")):
        engine.parallelize(Untraceable(), {"x": torch.zeros(2, 2)}, policy="dp", **keywords)


def test_parallelize_passes_other_keywords_to_the_engine(engine):
    """A keyword neither parallelize's nor close to one goes to the engine, which refuses what it does not know
    (naming the keyword); the corrected call trains as torch does, with two micro-batches of the batch."""
    steps = batches()
    with pytest.raises((TypeError, engine.PlanError), match="no_such_option"):
        engine.parallelize(Classifier("logits, loss"), steps[0], policy="dp", no_such_option=1)
    torch.manual_seed(0)
    model = Classifier("logits, loss")
    reference = copy.deepcopy(model)
    parallel = engine.parallelize(model, steps[0], policy="dp", microbatches=2, optimizer=OPTIMIZER)
    assert parallel.plan.degrees["micro_batches"] == 2
    losses = [parallel.train_step(b) for b in steps]
    assert losses == pytest.approx(torch_losses(reference, steps, the_loss), rel=RTOL)


SCRIPT = """
import copy, json, sys
import torch, torch.distributed as dist
sys.path.insert(0, {tests!r})
import loom
from test_parallelize_loss import OPTIMIZER, Classifier, batches, cross_entropy, torch_losses

dist.init_process_group("gloo")
torch.manual_seed(0)
model = Classifier("logits")
reference = copy.deepcopy(model)
steps = batches()
parallel = loom.parallelize(model, steps[0], policy="dp", dp=2, optimizer=OPTIMIZER, loss=cross_entropy)
losses = [parallel.train_step(b) for b in steps]
if dist.get_rank() == 0:
    print("LOSSES " + json.dumps({{"loom": losses, "torch": torch_losses(reference, steps, cross_entropy)}}))
dist.destroy_process_group()
"""


def test_loom_run_trains_a_loss_function_on_two_ranks(engine, loom_binary, tmp_path):
    """loss= under `loom run --nproc 2` (dp 2, gloo): every step's loss equals torch's on one process."""
    import pathlib

    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tests=str(pathlib.Path(__file__).parent)))
    run = subprocess.run([loom_binary, "run", "--nproc", "2", str(script)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(next(x for x in run.stdout.splitlines() if x.startswith("LOSSES "))[len("LOSSES "):])
    assert len(result["loom"]) == 2
    assert result["loom"] == pytest.approx(result["torch"], rel=RTOL)
