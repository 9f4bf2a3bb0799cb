"""Sharded checkpoints reshard: 2 AdamW steps of dp 2 x tp 2 saved (each rank its own pieces), resumed for a
third step on a 1F1B pipeline of 2 stages (through the CLI, `--resume`), on 1 device and on the same plan; the loss of
every step equals an uninterrupted 3-step run (rtol 1e-5; the same plan: bit-equal losses and values), and
the parameters equal it as test_runtime_steps measures."""

import subprocess
import sys

import pytest
import torch
from conftest import ROOT, emit_shrunk, loom_runner
from test_runtime_steps import adam_lr, worst_error

from loom.runtime import checkpoint
from loom.runtime.launch import LaunchError, train

RTOL = 1e-5
MODEL = "gpt3-125m"
PLAN_A = ["--policy", "megatron", "--dp", "2", "--tp", "2", "--gpus", "4"]
PLAN_B = ["--policy", "megatron", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b", "--gpus", "2"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, loom_binary):
    """Plan A's uninterrupted 3 steps, and its 2 steps saved to a checkpoint."""
    run_loom = loom_runner(loom_binary)
    root = tmp_path_factory.mktemp("checkpoint")
    plan_a = emit_shrunk(run_loom, root / "a", MODEL, PLAN_A)
    whole = train(plan_a, 3, out=root / "whole", timeout=120)
    saved = train(plan_a, 2, out=root / "first", save=root / "ckpt", timeout=120)
    return {"dir": root, "plan_a": plan_a, "whole": whole, "saved": saved, "ckpt": root / "ckpt"}


def test_each_rank_saves_its_own_pieces(runs):
    files = sorted(p.name for p in runs["ckpt"].glob("rank_*.pt"))
    assert files == [f"rank_{r}.pt" for r in range(4)]
    meta = checkpoint.read_meta(runs["ckpt"])
    assert meta["step"] == 2 and meta["world_size"] == 4
    sizes = [sum(v.numel() for _, _, v in torch.load(runs["ckpt"] / f)["pieces"]) for f in files]
    values, step = checkpoint.load(runs["ckpt"])
    assert step == 2
    assert max(sizes) < sum(v.numel() for v in values.values()), "a rank holds only its shards"
    assert any(n.endswith(".exp_avg_sq") for n in values), "optimizer states are saved"
    # The whole values are the 2-step run's results under the names the next step loads.
    for name, value in runs["saved"][1].items():
        if name.endswith(".updated"):
            assert torch.equal(values[name.removesuffix(".updated")], value), name


def test_same_plan_resumes_bit_equal(runs):
    values, step = checkpoint.load(runs["ckpt"])
    losses, resumed = train(runs["plan_a"], 1, initial=values, start_step=step, out=runs["dir"] / "same",
                            timeout=120)
    whole_losses, whole = runs["whole"]
    assert runs["saved"][0] == whole_losses[:2]
    assert losses == whole_losses[2:]
    assert sorted(resumed) == sorted(whole)
    for name, value in whole.items():
        assert torch.equal(resumed[name], value), name


def test_other_plan_resumes_through_the_cli(runs, loom_binary):
    run_loom = loom_runner(loom_binary)
    plan_b = emit_shrunk(run_loom, runs["dir"] / "b", MODEL, PLAN_B)
    out = runs["dir"] / "resumed-b"
    result = subprocess.run([sys.executable, "-m", "loom.runtime.launch", str(plan_b), "--steps", "1", "--resume",
                             str(runs["ckpt"]), "--out", str(out)], capture_output=True, text=True, timeout=300,
                            cwd=ROOT / "python")
    assert result.returncode == 0, result.stdout + result.stderr
    losses, values = torch.load(out / "losses.pt"), torch.load(out / "values.pt")
    whole_losses, whole = runs["whole"]
    assert abs(losses[0] - whole_losses[2]) <= RTOL * abs(whole_losses[2])
    assert losses[0] != whole_losses[1], "the third step, not a repeat of the second"
    rel, where, nulls = worst_error(whole, values, adam_lr(plan_b))
    print(f"resumed on pp2-1f1b: loss {losses[0]:.8g} vs {whole_losses[2]:.8g}; worst rel {rel:.2e} ({where}); "
          f"{nulls} null-gradient elements")
    assert rel <= RTOL, f"{where}: relative error {rel:.3e}"


def test_one_device_resumes_the_sharded_checkpoint(runs, loom_binary):
    plan_c = emit_shrunk(loom_runner(loom_binary), runs["dir"] / "c", MODEL, ["--policy", "dp", "--dp", "1", "--gpus", "1"])
    values, step = checkpoint.load(runs["ckpt"])
    losses, resumed = train(plan_c, 1, initial=values, start_step=step, out=runs["dir"] / "resumed-c")
    whole_losses, whole = runs["whole"]
    assert abs(losses[0] - whole_losses[2]) <= RTOL * abs(whole_losses[2])
    rel, where, _ = worst_error(whole, resumed, adam_lr(plan_c))
    assert rel <= RTOL, f"{where}: relative error {rel:.3e}"


def test_a_plan_of_another_model_is_refused(runs, loom_binary):
    other = emit_shrunk(loom_runner(loom_binary), runs["dir"] / "other", "llama3-8b", ["--policy", "dp", "--dp", "1", "--gpus", "1"])
    values, step = checkpoint.load(runs["ckpt"])
    with pytest.raises(LaunchError, match="names no tensor of the plan"):
        train(other, 1, initial=values, start_step=step, out=runs["dir"] / "other-out")


def test_incomplete_checkpoint_names_the_missing_file(runs, tmp_path):
    import shutil

    broken = tmp_path / "ckpt"
    shutil.copytree(runs["ckpt"], broken)
    (broken / "rank_3.pt").unlink()
    with pytest.raises(checkpoint.CheckpointError, match="rank_3.pt is missing"):
        checkpoint.load(broken)
    with pytest.raises(checkpoint.CheckpointError, match="--save"):
        checkpoint.load(tmp_path / "nothing")
