"""Checked checkpoints (issue 17, "Checkpoints"; checkpoint.py): a save commits only when every rank's shard is
on disk (a save where a rank failed leaves no checkpoint.json), and loading refuses, naming the file or the
tensor, what used to resume silently or with a bare traceback: flipped bits in a shard, a truncated or empty
shard, a negative step, non-finite optimizer state, and a checkpoint that lacks a tensor of the plan (or holds
one it does not have)."""

import hashlib
import json
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, emit_shrunk, loom_runner

from loom.runtime import checkpoint
from loom.runtime.checkpoint import CheckpointError
from loom.runtime.launch import LaunchError, load_manifest, train

DP2 = ["--policy", "dp", "--dp", "2", "--gpus", "2"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory, loom_binary):
    """A 2-layer GPT's dp 2 program and its checkpoint after 2 steps."""
    root = tmp_path_factory.mktemp("checked")
    program = emit_shrunk(loom_runner(loom_binary), root / "two", "gpt3-125m", DP2)
    train(program, 2, out=root / "out", save=root / "ckpt", timeout=60)
    return {"root": root, "program": program, "ckpt": root / "ckpt"}


@pytest.fixture()
def ckpt(saved, tmp_path):
    """A copy of the checkpoint to damage."""
    return pathlib.Path(shutil.copytree(saved["ckpt"], tmp_path / "ckpt"))


def test_the_record_holds_each_shards_checksum_and_the_plan_id(saved):
    meta = checkpoint.read_meta(saved["ckpt"])
    manifest = load_manifest(saved["program"])
    assert meta["step"] == 2 and meta["plan_id"] == manifest["plan_id"]
    for rank, shard in enumerate(meta["shards"]):
        data = (saved["ckpt"] / f"rank_{rank}.pt").read_bytes()
        assert shard["sha256"] == hashlib.sha256(data).hexdigest() and shard["bytes"] == len(data)
    assert sorted(set().union(*(s["tensors"] for s in meta["shards"]))) == checkpoint.saved_tensors(manifest)
    values, step = checkpoint.load(saved["ckpt"], manifest=manifest)
    assert step == 2 and sorted(values) == checkpoint.saved_tensors(manifest)


def test_a_save_where_a_rank_fails_is_not_committed(saved, ckpt):
    # Rank 1 cannot write its shard (a directory stands at its name); rank 0 used to write checkpoint.json
    # anyway, and the earlier checkpoint's record survived beside the new shard.
    (ckpt / "rank_1.pt").unlink()
    (ckpt / "rank_1.pt").mkdir()
    with pytest.raises(LaunchError, match="rank 1 failed: IsADirectoryError"):
        train(saved["program"], 1, out=saved["root"] / "failed-save", save=ckpt, timeout=60)
    assert not (ckpt / "checkpoint.json").exists()
    with pytest.raises(CheckpointError, match="save did not complete"):
        checkpoint.load(ckpt)


def test_flipped_bits_in_a_shard_are_detected(ckpt):
    # One mantissa bit of a saved parameter, in the shard's data: torch.load reads it without complaint.
    path = ckpt / "rank_0.pt"
    data = bytearray(path.read_bytes())
    pieces = torch.load(path, weights_only=True)["pieces"]
    value = next(v for name, _, v in pieces if name == "layers.0.mlp.fc1.weight")
    where = bytes(data).find(value.numpy().tobytes()[:64])
    assert where > 0
    data[where + 1] ^= 0x01
    path.write_bytes(bytes(data))
    assert torch.load(path, weights_only=True)["pieces"], "still a readable shard"
    with pytest.raises(CheckpointError, match=r"rank_0.pt does not match its sha256 in checkpoint.json"):
        checkpoint.load(ckpt)


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_a_truncated_or_empty_shard_names_the_file(ckpt, keep):
    path = ckpt / "rank_1.pt"
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(CheckpointError, match=rf"rank_1.pt is {int(len(data) * keep)} bytes, checkpoint.json says "
                                              rf"{len(data)}: the file is truncated"):
        checkpoint.load(ckpt)


def test_a_negative_step_is_refused(ckpt):
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    for step, shown in [(-5, "-5"), (2.5, "2.5"), ("2", "'2'")]:
        (ckpt / "checkpoint.json").write_text(json.dumps({**meta, "step": step}))
        with pytest.raises(CheckpointError, match=rf"step {shown} is not a count of steps taken"):
            checkpoint.load(ckpt)


def _recommit(ckpt, rank, change):
    """Rewrites rank's shard through change(shard) and records its new checksum, as a save would have."""
    path = ckpt / f"rank_{rank}.pt"
    shard = torch.load(path, weights_only=True)
    change(shard)
    torch.save(shard, path)
    data = path.read_bytes()
    meta = json.loads((ckpt / "checkpoint.json").read_text())
    meta["shards"][rank].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (ckpt / "checkpoint.json").write_text(json.dumps(meta))


def test_non_finite_optimizer_state_is_refused(ckpt):
    def poison(shard):
        for name, _, value in shard["pieces"]:
            if name == "layers.1.attn.qkv.weight.exp_avg_sq":
                value[0, 0] = float("nan")
                value[1, 1] = float("inf")

    _recommit(ckpt, 0, poison)
    _recommit(ckpt, 1, poison)
    with pytest.raises(CheckpointError, match=r"tensor 'layers.1.attn.qkv.weight.exp_avg_sq' holds 2 non-finite "
                                              r"values"):
        checkpoint.load(ckpt)


def test_shards_of_another_save_are_refused(ckpt):
    _recommit(ckpt, 1, lambda shard: shard.update(step=7))  # rank 1's shard of a later save, checksum and all
    with pytest.raises(CheckpointError, match="rank_1.pt was not saved with this checkpoint.json"):
        checkpoint.load(ckpt)


def test_a_plan_with_more_or_fewer_tensors_is_refused_naming_them(saved, loom_binary):
    run_loom = loom_runner(loom_binary)
    # A 3-layer and a 1-layer plan of the same preset:
    for layers, name in [("3", "three"), ("1", "one")]:
        result = run_loom("plan", "--model", "gpt3-125m", "--layers", layers, "--dtype", "f32", "--shrink", *DP2,
                          "--out", str(saved["root"] / name / "out"), "--emit", str(saved["root"] / name / "emit"))
        assert result.returncode == 0, result.stderr
    three, one = saved["root"] / "three" / "emit", saved["root"] / "one" / "emit"
    with pytest.raises(CheckpointError, match=r"lacks 'layers.2.[a-z0-9_.]+'.* which the plan .* keeps"):
        checkpoint.load(saved["ckpt"], manifest=load_manifest(three))
    with pytest.raises(CheckpointError, match=r"holds 'layers.1.[a-z0-9_.]+'.* which the plan .* does not have"):
        checkpoint.load(saved["ckpt"], manifest=load_manifest(one))
    # Through the CLI: resuming a 2-layer checkpoint on the 3-layer plan drew layer 2 fresh and exited 0.
    result = subprocess.run([sys.executable, "-m", "loom.runtime.launch", str(three), "--resume", str(saved["ckpt"])],
                            capture_output=True, text=True, timeout=120, cwd=ROOT / "python")
    assert result.returncode == 1 and "lacks 'layers.2." in result.stderr, result.stderr
