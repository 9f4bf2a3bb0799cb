"""Run a generated program: `python -m loom.runtime.launch DIR` starts one process per rank of
DIR/manifest.json (torch.multiprocessing, gloo on CPU or NCCL with --device cuda, MASTER_ADDR localhost
and a free port), runs one step of DIR/rank_<r>.py in each, and writes the assembled results (the loss and
every updated persistent tensor) to DIR/results/values.pt. Every collective has a timeout, and the
launcher stops the job as soon as a rank fails, naming the rank and the cause, instead of hanging.
"""

import argparse
import datetime
import importlib.util
import json
import os
import pathlib
import socket
import sys
import time
import traceback

import torch

from . import results as results_mod
from .runtime import Runtime


class LaunchError(RuntimeError):
    """A rank failed or the job ran past its timeout; the message names the rank and the cause."""


def load_manifest(directory):
    path = pathlib.Path(directory) / "manifest.json"
    if not path.is_file():
        raise LaunchError(f"{path} does not exist: write it with `loom plan ... --emit {directory}`")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != 1:
        raise LaunchError(f"{path}: manifest format {manifest.get('format')} is not 1 (regenerate it)")
    return manifest


def _rank_module(directory, rank):
    path = pathlib.Path(directory) / f"rank_{rank}.py"
    spec = importlib.util.spec_from_file_location(f"loom_rank_{rank}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_rank(directory, manifest, rank, comm=None, seed=1, device="cpu"):
    """One step of rank's program; returns its kept (name, piece, value) triples."""
    rt = Runtime(manifest, rank, comm=comm, seed=seed, device=device)
    _rank_module(directory, rank).step(rt)
    rt.finish()
    return rt.kept


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _worker(rank, directory, port, seed, device, timeout, out_dir):
    import torch.distributed as dist

    from .comm import Communicator

    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    try:
        manifest = load_manifest(directory)
        world = manifest["world_size"]
        backend = "nccl" if device == "cuda" else "gloo"
        if device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout))
        dev = f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu"
        comm = Communicator(rank, world, manifest["groups"], torch.device(dev))
        kept = run_rank(directory, manifest, rank, comm=comm, seed=seed, device=dev)
        torch.save(kept, out_dir / f"rank_{rank}.pt")
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 (any failure must reach the launcher with its rank)
        cause = f"{type(e).__name__}: {e}"
        (out_dir / f"rank_{rank}.error").write_text(cause + "\n\n" + traceback.format_exc())
        sys.exit(1)


def launch(directory, seed=1, device="cpu", timeout=300.0, out=None):
    """Runs every rank of DIR's program for one step; returns {tensor name: whole value} (loss and updated
    persistent tensors) and writes them to OUT/values.pt (OUT defaults to DIR/results)."""
    directory = pathlib.Path(directory)
    manifest = load_manifest(directory)
    world = int(manifest["world_size"])
    out_dir = pathlib.Path(out) if out else directory / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in list(out_dir.glob("rank_*.pt")) + list(out_dir.glob("rank_*.error")):
        stale.unlink()
    if world == 1:
        try:
            kept = run_rank(directory, manifest, 0, seed=seed, device=device)
        except Exception as e:  # noqa: BLE001 (reported as a multi-rank failure is)
            raise LaunchError(f"rank 0 failed: {type(e).__name__}: {e}") from e
    else:
        kept = _spawn(directory, world, seed, device, timeout, out_dir)
    values = results_mod.assemble(manifest, kept)
    torch.save(values, out_dir / "values.pt")
    return values


def _spawn(directory, world, seed, device, timeout, out_dir):
    import torch.multiprocessing as mp

    # A fork server that imported torch once forks every rank of every launch: no per-rank import of
    # torch (seconds on a small machine), and no fork of a process whose OpenMP threads already run.
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch.distributed", "loom.runtime.runtime", "loom.runtime.comm"])
    port = _free_port()
    processes = [context.Process(target=_worker, args=(r, str(directory), port, seed, device, timeout, out_dir),
                                 daemon=True) for r in range(world)]
    for p in processes:
        p.start()
    deadline = time.monotonic() + timeout + 30
    try:
        while any(p.is_alive() for p in processes):
            for rank, p in enumerate(processes):
                if p.exitcode not in (None, 0):
                    raise LaunchError(f"rank {rank} failed: {_cause(out_dir, rank, p.exitcode)}")
            if time.monotonic() > deadline:
                stuck = [r for r, p in enumerate(processes) if p.is_alive()]
                raise LaunchError(f"ranks {stuck} did not finish within {timeout:g} s (a hang: see docs/codegen.md)")
            time.sleep(0.05)
        for rank, p in enumerate(processes):
            if p.exitcode != 0:
                raise LaunchError(f"rank {rank} failed: {_cause(out_dir, rank, p.exitcode)}")
    finally:
        for p in processes:
            if p.is_alive():
                p.terminate()
        for p in processes:
            p.join(5)
    kept = []
    for rank in range(world):
        kept.extend(torch.load(out_dir / f"rank_{rank}.pt"))
    return kept


def _cause(out_dir, rank, exitcode):
    error = out_dir / f"rank_{rank}.error"
    if error.is_file():
        return error.read_text().splitlines()[0]
    return f"exit code {exitcode} (no error report: killed?)"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m loom.runtime.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="directory written by `loom plan ... --emit DIR`")
    parser.add_argument("--seed", type=int, default=1, help="seed of the initial values (as `loom verify --seed`)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds any collective may wait")
    parser.add_argument("--out", help="results directory (default DIR/results)")
    args = parser.parse_args(argv)
    try:
        values = launch(args.dir, seed=args.seed, device=args.device, timeout=args.timeout, out=args.out)
    except (LaunchError, results_mod.ResultError) as e:
        print(f"loom.runtime: error: {e}", file=sys.stderr)
        return 1
    loss = load_manifest(args.dir).get("loss")
    if loss in values:
        print(f"loss       {float(values[loss]):.8g}")
    print(f"results    {len(values)} tensors in {pathlib.Path(args.out or pathlib.Path(args.dir) / 'results') / 'values.pt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
