"""Distributed checkpoints: every rank saves its own pieces of the persistent tensors (parameters and optimizer
states, as the last step updated them), and loading assembles whole single-device values, so a run resumes
on the same plan or on any other plan of the same model (resharding is the new plan's loads restricting the
whole values to its pieces: Runtime(initial=...)).

    CKPT/rank_<r>.pt       rank r's pieces: [(tensor name, piece, value)] under the names the next step loads
    CKPT/checkpoint.json   the step count, the plan's description and world size, and each saved tensor's
                           shape and dtype (rank 0 writes it)

    python -m loom.runtime.launch DIR --steps 2 --save CKPT
    python -m loom.runtime.launch OTHER_DIR --steps 1 --resume CKPT
"""

import json
import pathlib

import torch

from . import results

FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint directory is incomplete or does not fit the plan; the message names the file."""


def save(directory, manifest, rank, kept, step):
    """Writes rank's pieces of every persistent tensor it kept (each `X.updated`, saved as X: what the next step
    loads) and, on rank 0, checkpoint.json with `step` (the optimizer steps taken so far)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = manifest["tensors"]
    pieces = [(tensors[name]["updates"], piece, value.detach().cpu())
              for name, piece, value in kept if "updates" in tensors[name]]
    torch.save(pieces, directory / f"rank_{rank}.pt")
    if rank == 0:
        saved = sorted(entry["updates"] for entry in tensors.values() if "updates" in entry)
        meta = {
            "format": FORMAT,
            "step": int(step),
            "world_size": int(manifest["world_size"]),
            "plan": manifest.get("description", ""),
            "tensors": {n: {"shape": tensors[n]["shape"], "dtype": tensors[n]["dtype"]} for n in saved},
        }
        (directory / "checkpoint.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def read_meta(directory):
    path = pathlib.Path(directory) / "checkpoint.json"
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist: write a checkpoint with `--save {directory}`")
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {meta.get('format')} is not {FORMAT}")
    return meta


def load(directory):
    """({tensor name: whole single-device value}, steps taken) from every rank's pieces: pass them as
    train(initial=..., start_step=...) on the same or another plan."""
    directory = pathlib.Path(directory)
    meta = read_meta(directory)
    kept = []
    for rank in range(meta["world_size"]):
        path = directory / f"rank_{rank}.pt"
        if not path.is_file():
            raise CheckpointError(f"{path} is missing: the checkpoint of a {meta['world_size']}-rank plan needs "
                                  f"every rank's file")
        kept.extend(torch.load(path))
    try:
        values = results.assemble({"tensors": meta["tensors"]}, kept)
    except results.ResultError as e:
        raise CheckpointError(f"{directory}: {e}") from None
    missing = sorted(set(meta["tensors"]) - set(values))
    if missing:
        raise CheckpointError(f"{directory}: no rank saved a piece of {missing[:5]}")
    return values, int(meta["step"])
