"""Distributed checkpoints: every rank saves its own pieces of the persistent tensors (parameters and optimizer
states, as the last step updated them), and loading assembles whole single-device values, so a run resumes
on the same plan or on any other plan of the same model (resharding is the new plan's loads restricting the
whole values to its pieces: Runtime(initial=...)).

    CKPT/rank_<r>.pt       rank r's shard: {"plan_id", "rank", "step", "pieces": [(tensor name, piece, value)]}
                           under the names the next step loads
    CKPT/checkpoint.json   the commit record (rank 0 writes it last): the step count, the plan's id, description
                           and world size, each saved tensor's shape and dtype, and per shard its file, sha256,
                           byte size and tensor names

The commit protocol (docs/codegen.md, "Checkpoints"): rank 0 removes an earlier checkpoint.json; every rank
writes its shard whole and fsynced (files.py); every rank's shard description is gathered (a barrier: no rank
goes on before every shard is on disk); then rank 0 writes checkpoint.json, whole and fsynced. A save where
any rank failed leaves no checkpoint.json, so it is never taken for a checkpoint. Loading checks every shard
against its size and sha256, the shards' plan id and step against the record, every tensor of the plan present
and none extra (naming the tensor), the step count, and finite values.

    python -m loom.runtime.launch DIR --steps 2 --save CKPT
    python -m loom.runtime.launch OTHER_DIR --steps 1 --resume CKPT
"""

import hashlib
import io
import json
import pathlib
import re

import torch

from . import files, results

FORMAT = 2
RECORD = "checkpoint.json"
_HEX64 = re.compile(r"[0-9a-f]{64}")


class CheckpointError(ValueError):
    """A checkpoint directory is incomplete, corrupt or does not fit the plan; the message names the file or
    tensor."""


def saved_tensors(manifest):
    """The names a plan's checkpoint holds and its resume loads: every persistent tensor it updates."""
    return sorted({entry["updates"] for entry in manifest["tensors"].values() if "updates" in entry})


def save(directory, manifest, rank, kept, step, gather):
    """Writes rank's shard (its pieces of every persistent tensor it kept: each `X.updated`, saved as X, what the
    next step loads) and, once `gather` (every rank's object, in rank order, after every rank called it: the
    barrier) shows every shard written, rank 0 writes checkpoint.json. `step`: the optimizer steps taken so far.
    Every rank calls it."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if rank == 0:
        (directory / RECORD).unlink(missing_ok=True)  # the directory is not a checkpoint until this save commits
    tensors = manifest["tensors"]
    pieces = [(tensors[name]["updates"], piece, value.detach().cpu())
              for name, piece, value in kept if "updates" in tensors[name]]
    shard = {"format": FORMAT, "plan_id": manifest["plan_id"], "rank": rank, "step": int(step), "pieces": pieces}
    buffer = io.BytesIO()
    torch.save(shard, buffer)
    data = buffer.getvalue()
    name = f"rank_{rank}.pt"
    files.write_atomically(directory / name, lambda f: f.write(data))
    described = {"file": name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                 "tensors": sorted({n for n, _, _ in pieces})}
    shards = gather(described)
    if rank == 0:
        saved = saved_tensors(manifest)
        record = {
            "format": FORMAT,
            "step": int(step),
            "plan_id": manifest["plan_id"],
            "plan": manifest.get("description", ""),
            "world_size": int(manifest["world_size"]),
            "tensors": {n: {"shape": tensors[n]["shape"], "dtype": tensors[n]["dtype"]} for n in saved},
            "shards": shards,
        }
        files.write_text_atomically(directory / RECORD, json.dumps(record, indent=1, sort_keys=True) + "\n")


def read_meta(directory):
    """checkpoint.json, its fields checked."""
    path = pathlib.Path(directory) / RECORD
    meta = files.read_json_object(path, CheckpointError, f"not a checkpoint, or its save did not complete (write "
                                  f"one with `--save {directory}`)", "the checkpoint is damaged; save it again")
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {meta.get('format')} is not {FORMAT} (an older loom's, "
                              f"without checksums): save it again with this loom")

    def bad(what):
        return CheckpointError(f"{path}: {what} (the record is damaged or edited; save the checkpoint again)")

    step, world = meta.get("step"), meta.get("world_size")
    if type(step) is not int or step < 0:
        raise bad(f"step {step!r} is not a count of steps taken (an integer >= 0)")
    if type(world) is not int or world < 1:
        raise bad(f"world_size {world!r} is not a number of ranks (>= 1)")
    if not isinstance(meta.get("plan_id"), str) or not _HEX64.fullmatch(meta["plan_id"]):
        raise bad(f"plan_id {meta.get('plan_id')!r} is not a sha256 hex digest")
    tensors = meta.get("tensors")
    if not isinstance(tensors, dict) or not all(
            isinstance(e, dict) and isinstance(e.get("shape"), list) and isinstance(e.get("dtype"), str)
            for e in tensors.values()):
        raise bad("'tensors' must map each tensor's name to its shape and dtype")
    shards = meta.get("shards")
    if not isinstance(shards, list) or len(shards) != world:
        raise bad(f"{len(shards) if isinstance(shards, list) else 'no'} shards for world_size {world}")
    for rank, shard in enumerate(shards):
        if not (isinstance(shard, dict) and shard.get("file") == f"rank_{rank}.pt"
                and isinstance(shard.get("sha256"), str) and _HEX64.fullmatch(shard["sha256"])
                and type(shard.get("bytes")) is int and shard["bytes"] >= 0
                and isinstance(shard.get("tensors"), list) and all(n in tensors for n in shard["tensors"])):
            raise bad(f"shards[{rank}] is not rank_{rank}.pt's file, sha256, byte size and tensors of the record")
    return meta


def load(directory, manifest=None):
    """({tensor name: whole single-device value}, steps taken) from every rank's shard: pass them as
    train(initial=..., start_step=...) on the same or another plan. With the `manifest` of the plan that will
    resume, every tensor that plan keeps must be in the checkpoint and no other one."""
    directory = pathlib.Path(directory)
    meta = read_meta(directory)
    kept = []
    for rank, shard in enumerate(meta["shards"]):
        kept.extend(_read_shard(directory / shard["file"], shard, rank, meta))
    try:
        values = results.assemble({"tensors": meta["tensors"]}, kept)
    except results.ResultError as e:
        raise CheckpointError(f"{directory}: {e}") from None
    missing = sorted(set(meta["tensors"]) - set(values))
    if missing:
        raise CheckpointError(f"{directory}: no rank saved a piece of {_names(missing)}")
    for name, value in values.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            count = int((~torch.isfinite(value)).sum())
            raise CheckpointError(f"{directory}: tensor '{name}' holds {count} non-finite values (NaN or inf): the run "
                                  f"that saved it diverged; resume from an earlier checkpoint")
    if manifest is not None:
        wanted = set(saved_tensors(manifest))
        absent, extra = sorted(wanted - set(values)), sorted(set(values) - wanted)
        plan = manifest.get("description", "")
        if absent:
            raise CheckpointError(f"{directory} lacks {_names(absent)}, which the plan ({plan}) keeps: it was saved "
                                  f"by a plan of another model ({meta['plan']})")
        if extra:
            raise CheckpointError(f"{directory} holds {_names(extra)}, which the plan ({plan}) does not have: it was "
                                  f"saved by a plan of another model ({meta['plan']})")
    return values, meta["step"]


def _read_shard(path, shard, rank, meta):
    """A shard's (name, piece, value) triples, once its size and sha256 match the record and its own header
    (plan id, rank, step, tensor names) matches too."""
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint of a {meta['world_size']}-rank plan needs every "
                              f"rank's file")
    data = path.read_bytes()
    if len(data) != shard["bytes"]:
        raise CheckpointError(f"{path} is {len(data)} bytes, {RECORD} says {shard['bytes']}: the file is truncated or "
                              f"replaced; the checkpoint cannot be used (save it again)")
    if hashlib.sha256(data).hexdigest() != shard["sha256"]:
        raise CheckpointError(f"{path} does not match its sha256 in {RECORD}: the file changed after the save "
                              f"(corrupt); the checkpoint cannot be used (save it again)")
    try:
        content = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # noqa: BLE001 (any unreadable shard is reported naming its file)
        raise CheckpointError(f"{path} is not a checkpoint shard ({type(e).__name__}: {e})") from None
    if not (isinstance(content, dict) and content.get("plan_id") == meta["plan_id"] and content.get("rank") == rank
            and content.get("step") == meta["step"] and isinstance(content.get("pieces"), list)):
        raise CheckpointError(f"{path} was not saved with this {RECORD} (its plan id, rank or step differ): the "
                              f"directory mixes two saves; save the checkpoint again")
    pieces = content["pieces"]
    if sorted({name for name, _, _ in pieces}) != sorted(shard["tensors"]):
        raise CheckpointError(f"{path}: its tensors are not those {RECORD} lists for it")
    return pieces


def _names(names):
    shown = ", ".join(f"'{n}'" for n in names[:5])
    return f"{shown} and {len(names) - 5} more" if len(names) > 5 else shown


