"""Run a generated program: `python -m loom.runtime.launch DIR [--steps N]` starts one process per rank of
DIR/manifest.json (torch.multiprocessing, gloo on CPU or NCCL with --device cuda, MASTER_ADDR localhost
and a free port), runs N training steps of DIR/rank_<r>.py in each (each step loads what the previous one
updated, and a new batch), prints the loss of every step and writes the assembled results of the last step
(the loss and every updated persistent tensor) to DIR/results/values.pt, the losses to losses.pt. The rank
programs are checked against the manifest's checksums before any starts (programs.py). Every collective and
transfer waits at most --timeout seconds (a run itself may take as long as it takes); the launcher watches
each rank's progress (heartbeat.py) and stops the job as soon as a rank fails or stops, naming the rank, where
it was and the cause, and ends every rank (supervise.py). `--save CKPT` writes a sharded checkpoint after the
last step, `--resume CKPT` starts from one saved by this or any other plan of the same model (checkpoint.py).
"""

import argparse
import datetime
import faulthandler
import importlib.util
import json
import math
import os
import pathlib
import signal
import socket
import sys
import time
import traceback

import torch

from . import checkpoint, files, forms, heartbeat, memory, supervise
from . import results as results_mod
from .allocator import keep_freed_memory
from .compute import OPTIMIZERS
from .errors import LaunchError
from .programs import check_programs, load_manifest
from .runtime import Runtime, on_cpu
from .timeline import ASYNC_STARTS, Timeline

__all__ = ["LaunchError", "load_manifest", "launch", "train", "read_timing", "run_rank", "main"]


def _rank_module(directory, rank):
    path = pathlib.Path(directory) / f"rank_{rank}.py"
    spec = importlib.util.spec_from_file_location(f"loom_rank_{rank}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_rank(directory, manifest, rank, comm=None, seed=1, device="cpu", steps=1, timing=None, initial=None,
             batches=None, start_step=0, progress=None):
    """`steps` steps of rank's program; returns (the loss's kept triples of every step, all kept triples of
    the last step). A `timing` dict, when given, receives the wall seconds of every step ("step_s") and, per
    instruction kind, the seconds and calls summed over the steps after the first (the only step when there
    is one: "kinds", _instrument) and the peak bytes of the buffers the instructions produced ("peak_bytes",
    memory.py: as the memory model counts them, in the first step) and the last step's spans ("timeline":
    [(kind, start s, end s)], timeline.py). `initial`, `start_step`: as Runtime's; `batches`: per step, the inputs'
    whole values (else generated); `progress`: the rank's heartbeat (told each step's number)."""
    if batches is not None and len(batches) < steps:
        raise LaunchError(f"{len(batches)} batches for {steps} steps")
    rt = Runtime(manifest, rank, comm=comm, seed=seed, device=device, initial=initial, start_step=start_step)
    program = _rank_module(directory, rank)
    timeline = Timeline()
    kinds = _instrument(rt, manifest, timeline) if timing is not None else None
    # The peak is taken in the first step, which is timed apart: the tracker's per-tensor bookkeeping stays out
    # of the steps whose times are measured (step_s after the first, "kinds").
    live, untrack = memory.track(rt) if timing is not None else (None, None)
    losses = []
    for step in range(steps):
        if progress is not None:
            progress.phase(heartbeat.STEPPING, step=start_step + step + 1)
        if step:
            rt.next_step()
        if kinds is not None and step == 1:
            kinds.clear()  # the first step builds every sub-op's form: timed apart, in step_s only
            untrack()
        if batches is not None:
            rt.set_batch(batches[step])
        timeline.start_step(active=step == steps - 1)
        start = time.perf_counter()
        program.step(rt)
        rt.finish()
        if timing is not None:
            if str(device).startswith("cuda"):
                torch.cuda.synchronize()  # the step ends when its kernels do, not when the host has issued them
            timing.setdefault("step_s", []).append(time.perf_counter() - start)
            timing["timeline"] = timeline.finished()
        losses.append(on_cpu(k for k in rt.kept if k[0] == manifest.get("loss")))
    if timing is not None:
        timing["kinds"] = dict(kinds)
        timing["peak_bytes"] = live.peak
    return losses, on_cpu(rt.kept)


def _compute_kind(spec):
    """How a compute instruction runs (compute.py): forward form, autograd over it, closed form, optimizer."""
    forward = spec.get("backward_of")
    if forward is None:
        return f"optimizer ({spec['type']})" if spec["type"] in OPTIMIZERS else "compute forward"
    closed = forward["type"] in forms.FROM_OUTPUT and not forward["saved_inputs"] or forward["type"] in forms.BACKWARD
    return "backward closed form" if closed else "backward autograd"


def _instrument(rt, manifest, timeline):
    """Wraps rt's instruction methods to sum wall seconds per kind ("all_reduce", "compute forward", ...;
    "load", "keep", "slice", "scale", "combine", "accumulate" are the locals). A collective's time includes waiting for
    the slowest member, a reader's the wait for a receive in flight it reads first (a recv only posts it);
    a compute also counts under "<kind>: <op type>". Each call is also a span of `timeline` (an asynchronous
    start's span lasts until its work completes). Returns the {kind: [seconds, calls]} dict it fills."""
    kinds = {}
    sub_op_kind = {int(i): _compute_kind(spec) for i, spec in manifest["sub_ops"].items()}
    sub_op_type = {int(i): (spec.get("backward_of") or spec)["type"] for i, spec in manifest["sub_ops"].items()}

    def timed(name, method):
        def call(*args, **kwargs):
            start = time.perf_counter()
            result = method(*args, **kwargs)
            end = time.perf_counter()
            seconds = end - start
            keys = [name]
            if name == "compute":
                keys = [sub_op_kind[int(args[0])], f"{sub_op_kind[int(args[0])]}: {sub_op_type[int(args[0])]}"]
            if name in ASYNC_STARTS:
                timeline.async_span(name, start, result.work)
            else:
                timeline.span(keys[0], start, end)
            for key in keys:
                entry = kinds.setdefault(key, [0.0, 0])
                entry[0] += seconds
                entry[1] += 1
            return result
        return call

    for name in ("load", "compute", "keep", "slice", "scale", "combine", "accumulate", "all_reduce", "all_reduce_start",
                 "wait", "reduce_scatter", "reduce_scatter_start", "chained", "all_gather", "all_gather_start", "all_to_all",
                 "send", "recv", "finish"):
        setattr(rt, name, timed(name, getattr(rt, name)))
    return kinds


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _worker(rank, directory, port, seed, device, timeout, out_dir, steps, timed=False, values=None, save=None,
            slots=None, backend=None):
    import torch.distributed as dist

    from .comm import Communicator

    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    keep_freed_memory()  # a step's freed tensors stay for the next step (allocator.py)
    beat = heartbeat.Heartbeat(slots, rank)
    stack = open(out_dir / f"rank_{rank}.stack", "w")  # noqa: SIM115 (open while the rank lives)
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=False)  # where it is, when the launcher asks
    try:
        manifest = load_manifest(directory)
        world = manifest["world_size"]
        backend = backend or default_backend(device)
        if device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        limit = datetime.timedelta(seconds=timeout)
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=limit)
        dev = f"cuda:{torch.cuda.current_device()}" if device == "cuda" else "cpu"
        comm = Communicator(rank, world, manifest["groups"], torch.device(dev), timeout=limit, heartbeat=beat)
        timing = {} if timed else None
        given = torch.load(values) if values else {}  # a file: tensors do not travel well as process arguments
        loss_kept, kept = run_rank(directory, manifest, rank, comm=comm, seed=seed, device=dev, steps=steps,
                                   timing=timing, progress=beat, **given)
        beat.phase(heartbeat.SAVING)
        files.save_atomically((loss_kept, kept), out_dir / f"rank_{rank}.pt")
        if save:
            checkpoint.save(save, manifest, rank, kept, given.get("start_step", 0) + steps,
                            gather=_gathered(dist, beat))
        if timed:
            files.save_atomically(timing, out_dir / f"rank_{rank}.timing.pt")
        beat.phase(heartbeat.FINISHING)
        beat.enter()
        dist.barrier()
        beat.leave()
        dist.destroy_process_group()
        beat.phase(heartbeat.DONE)
    except BaseException as e:  # noqa: BLE001 (any failure must reach the launcher with its rank)
        beat.failed()
        report = {"cause": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        files.write_text_atomically(out_dir / f"rank_{rank}.error", json.dumps(report))
        sys.exit(1)


def _gathered(dist, beat):
    """all_gather_object over every rank, bracketed for the watchdog: the checkpoint's barrier."""
    def gather(obj):
        everyone = [None] * dist.get_world_size()
        beat.enter()
        dist.all_gather_object(everyone, obj)
        beat.leave()
        return everyone
    return gather


def default_backend(device):
    """NCCL for ranks on GPUs, gloo on CPU. gloo also runs on CUDA tensors (staged through the host), which is
    how two ranks share one GPU: NCCL refuses two ranks on the same device."""
    return "nccl" if device == "cuda" else "gloo"


def launch(directory, seed=1, device="cpu", timeout=300.0, out=None, steps=1):
    """Runs every rank of DIR's program for `steps` steps; returns {tensor name: whole value} of the last
    step (loss and updated persistent tensors) and writes them to OUT/values.pt (OUT defaults to
    DIR/results)."""
    return train(directory, steps, seed=seed, device=device, timeout=timeout, out=out)[1]


def train(directory, steps, seed=1, device="cpu", timeout=300.0, out=None, timed=False, initial=None, batches=None,
          start_step=0, save=None, backend=None):
    """Runs every rank of DIR's program for `steps` steps; returns ([loss of every step], {tensor name:
    whole value} of the last step), written to OUT/losses.pt and OUT/values.pt. `timed`: also writes
    OUT/timing.pt, per rank (in rank order) run_rank's timing dict (wall seconds of every step, seconds per
    instruction kind after the first step, the last step's spans: timeline.py; read_timing). `initial` ({tensor name: whole value}, e.g.
    initial.module_state), `batches` ([{input name: whole value}] per step) and `start_step` replace the
    seeded generator's values (Runtime). `save`: a directory where every rank writes its pieces of the
    persistent tensors after the last step (checkpoint.save; resume with checkpoint.load). `backend`: the
    torch.distributed backend of a multi-rank run (default_backend(device) when None)."""
    if backend not in (None, "gloo", "nccl"):
        raise LaunchError(f"--backend {backend}: gloo or nccl")
    if backend == "nccl" and device != "cuda":
        raise LaunchError("--backend nccl needs --device cuda (NCCL runs on GPUs only)")
    values = {"initial": initial, "batches": batches, "start_step": start_step}
    if steps < 1:
        raise LaunchError(f"--steps {steps}: a run has at least one step")
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise LaunchError(f"--timeout {timeout}: the seconds one collective may wait, a positive number")
    directory = pathlib.Path(directory)
    manifest = load_manifest(directory)
    check_programs(directory, manifest)
    world = manifest["world_size"]
    out_dir = pathlib.Path(out) if out else directory / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove_results(out_dir)
    if world == 1:
        timing = {} if timed else None
        try:
            loss_kept, kept = run_rank(directory, manifest, 0, seed=seed, device=device, steps=steps,
                                       timing=timing, **values)
        except Exception as e:  # noqa: BLE001 (reported as a multi-rank failure is)
            raise LaunchError(f"rank 0 failed: {type(e).__name__}: {e}") from e
        if timed:
            files.save_atomically(timing, out_dir / "rank_0.timing.pt")
        if save:
            checkpoint.save(save, manifest, 0, kept, start_step + steps, gather=lambda obj: [obj])
    else:
        given = out_dir / "given_values.pt"
        torch.save(values, given)
        loss_kept, kept = _spawn(directory, world, seed, device, timeout, out_dir, steps, timed, str(given),
                                 str(save) if save else None, backend)
    losses = [results_mod.assemble(manifest, step_kept).get(manifest.get("loss")) for step_kept in loss_kept]
    losses = [None if loss is None else float(loss) for loss in losses]
    values = results_mod.assemble(manifest, kept)
    if timed:
        files.save_atomically([torch.load(out_dir / f"rank_{r}.timing.pt") for r in range(world)], out_dir / "timing.pt")
    files.save_atomically(losses, out_dir / "losses.pt")
    files.save_atomically(values, out_dir / "values.pt")  # last: its presence says the run completed
    return losses, values


def _remove_results(out_dir):
    """An earlier run's files in OUT, so a failed run leaves none that look like its own."""
    for pattern in ("values.pt", "losses.pt", "timing.pt", "given_values.pt", "rank_*.pt", "rank_*.error",
                    "rank_*.stack", "rank_*.timing.pt"):
        for stale in out_dir.glob(pattern):
            stale.unlink()


def read_timing(out):
    """The timing.pt a `train(..., timed=True)` wrote to OUT: [per rank {"step_s": [...], "kinds": {kind:
    [seconds, calls]}}]."""
    return torch.load(pathlib.Path(out) / "timing.pt")


def _spawn(directory, world, seed, device, timeout, out_dir, steps, timed=False, values=None, save=None,
           backend=None):
    # The port is free when picked but only bound when rank 0 starts its store; a process starting beside
    # (another launch, a test) may take it first. Then the whole launch runs again on a new port.
    for attempt in range(3):
        try:
            return _spawn_once(directory, world, seed, device, timeout, out_dir, steps, timed, values, save, backend)
        except supervise.PortTaken:
            if attempt == 2:
                raise
            for pattern in ("rank_*.error", "rank_*.stack"):
                for stale in pathlib.Path(out_dir).glob(pattern):
                    stale.unlink()
    raise AssertionError("unreachable")


def _spawn_once(directory, world, seed, device, timeout, out_dir, steps, timed=False, values=None, save=None,
                backend=None):
    import torch.multiprocessing as mp

    # A fork server that imported torch once forks every rank of every launch: no per-rank import of
    # torch (seconds on a small machine), and no fork of a process whose OpenMP threads already run.
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch.distributed", "loom.runtime.runtime", "loom.runtime.comm"])
    port = _free_port()
    slots = heartbeat.slots_for(context, world)
    processes = [context.Process(target=_worker,
                                 args=(r, str(directory), port, seed, device, timeout, out_dir, steps, timed, values,
                                       save, slots, backend),
                                 daemon=True) for r in range(world)]
    try:
        for p in processes:
            p.start()
    except BaseException:
        supervise.tear_down([p for p in processes if p.pid is not None])
        raise
    supervise.supervise(processes, slots, directory, out_dir, timeout)
    loss_kept, kept = [[] for _ in range(steps)], []
    for rank in range(world):
        rank_losses, rank_kept = torch.load(out_dir / f"rank_{rank}.pt")
        for step, triples in enumerate(rank_losses):
            loss_kept[step].extend(triples)
        kept.extend(rank_kept)
    return loss_kept, kept


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m loom.runtime.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="directory written by `loom plan ... --emit DIR`")
    parser.add_argument("--seed", type=int, default=1, help="seed of the initial values (as `loom verify --seed`)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--backend", choices=["gloo", "nccl"],
                        help="torch.distributed backend (default: nccl on cuda, gloo on cpu; gloo on cuda lets "
                             "ranks share one GPU)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds any one collective or transfer may wait (default 300); a run itself may take "
                             "any time. A rank that stops making progress that long while others wait is named")
    parser.add_argument("--out", help="results directory (default DIR/results)")
    parser.add_argument("--steps", type=int, default=1, help="optimizer steps to run (default 1)")
    parser.add_argument("--save", metavar="CKPT", help="after the last step, write a sharded checkpoint to CKPT")
    parser.add_argument("--resume", metavar="CKPT",
                        help="start from checkpoint CKPT (saved by any plan of the same model: resharded)")
    args = parser.parse_args(argv)
    try:
        initial, start_step = checkpoint.load(args.resume, manifest=load_manifest(args.dir)) if args.resume \
            else (None, 0)
        losses, values = train(args.dir, args.steps, seed=args.seed, device=args.device, timeout=args.timeout,
                               out=args.out, initial=initial, start_step=start_step, save=args.save,
                               backend=args.backend)
    except (LaunchError, results_mod.ResultError, checkpoint.CheckpointError, ValueError) as e:
        print(f"loom.runtime: error: {e}", file=sys.stderr)
        return 1
    for step, loss in enumerate(losses):
        if loss is not None:
            print(f"loss       {loss:.8g}" if len(losses) == 1 else f"step {start_step + step + 1:<5d}loss {loss:.8g}")
    print(f"results    {len(values)} tensors in {pathlib.Path(args.out or pathlib.Path(args.dir) / 'results') / 'values.pt'}")
    if args.save:
        print(f"checkpoint step {start_step + args.steps} in {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
