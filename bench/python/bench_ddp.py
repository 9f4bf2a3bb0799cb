"""Loom's data-parallel step beside torch DistributedDataParallel, 4 gloo processes, one run side by side:
`PYTHONPATH=python .venv/bin/python bench/python/bench_ddp.py --loom build/loom`.

A transformers GPT-2 (float32, from a config) is traced (`loom.trace`) and planned by the engine
(`loom plan --graph G --policy dp --gpus 4 --emit DIR`); `loom.runtime.launch.train(DIR, N, timed=True)`
runs N AdamW steps of the generated rank programs. The same model runs N AdamW steps under
torch.nn.parallel.DistributedDataParallel on 4 gloo processes (torch.multiprocessing, the same per-rank
batch, one thread per process as the runtime's ranks). A step's time is the slowest rank's wall time of
that step; the first step (process start, sub-op forms, DDP's bucket setup) is left out: the median of
steps 2..N. The pair runs --repeats times, alternating which goes first; the table gives every repeat and
the medians, then where Loom's step time goes per instruction kind (summed over ranks' steps 2..N, median
repeat; "backward autograd" there counts every backward sub-op the launcher does not know as closed form,
those of runtime/backward_forms.py included).
Nothing here changes the plan or the generated code: this measures. (The runtime defers Adam(W) steps and runs
them as one multi-tensor call at the next other instruction: the "optimizer" row counts the deferral and the
copies of inputs the program does not donate (the first step's only, docs/codegen.md "In-place optimizer
steps"), the batched update itself shows in the row of the instruction that flushed it, `wait` or `keep`.)
"""

import argparse
import datetime
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def gpt2_config(args):
    import transformers

    return transformers.GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=args.heads,
                                   vocab_size=args.vocab, n_positions=args.seq)


def trace(args, path):
    import logging

    import torch
    import transformers

    import loom

    transformers.logging.set_verbosity_error()
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
    torch.manual_seed(0)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq))
    model = transformers.GPT2LMHeadModel(gpt2_config(args))
    loom.save_graph(loom.trace(model, {"input_ids": ids, "labels": ids}), path)


def plan(args, graph, out):
    command = [args.loom, "plan", "--graph", str(graph), "--policy", "dp", "--gpus", str(args.world), "--out",
               str(out / "plan"), "--emit", str(out / "emit")]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"bench_ddp: `{' '.join(command)}` failed:\n{result.stderr}")
    return out / "emit", " ".join(command)


def plan_adamw(emit):
    """torch.optim.AdamW's arguments from the plan's optimizer sub-ops, so both sides take the same step."""
    import json

    manifest = json.loads((emit / "manifest.json").read_text())
    attrs = next(s["attrs"] for s in manifest["sub_ops"].values() if s["type"] == "adamw")
    return {"lr": attrs["lr"], "betas": (attrs["beta1"], attrs["beta2"]), "eps": attrs["eps"],
            "weight_decay": attrs["weight_decay"]}


def slowest_rank_steps(per_rank_step_s):
    """Per step, the slowest rank's seconds (the step ends for the job when its last rank ends)."""
    return [max(steps) for steps in zip(*per_rank_step_s)]


def step_batches(args):
    """Every step's global batch of token ids, as the torch side draws them (its workers draw before timing a
    step; Loom's runs get them as values, so neither side's step time counts drawing its data)."""
    import torch

    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator) for _ in range(args.steps)]


def run_loom(emit, args, out):
    from loom.runtime.launch import read_timing, train

    batches = [{"input_ids": ids, "labels": ids} for ids in step_batches(args)]
    losses, _ = train(emit, args.steps, out=out, timed=True, batches=batches)
    timing = read_timing(out)
    steps = slowest_rank_steps([t["step_s"] for t in timing])
    return statistics.median(steps[1:]), losses, timing


# --- torch DDP --------------------------------------------------------------------------------------------

def _ddp_worker(rank, args, port, out_dir):
    import torch
    import torch.distributed as dist
    import transformers

    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    dist.init_process_group("gloo", rank=rank, world_size=args.world, timeout=datetime.timedelta(seconds=300))
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(gpt2_config(args))
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(ddp.parameters(), **args.adamw)
    local = args.batch // args.world
    step_s, losses = [], []
    for step, whole in enumerate(step_batches(args)):
        ids = whole[rank * local:(rank + 1) * local]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = ddp(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        step_s.append(time.perf_counter() - start)
        losses.append(float(loss.detach()))
    torch.save({"step_s": step_s, "losses": losses}, out_dir / f"ddp_rank_{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_ddp(args, out):
    import torch
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch.distributed", "transformers"])
    port = _free_port()
    processes = [context.Process(target=_ddp_worker, args=(r, args, port, out)) for r in range(args.world)]
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    failed = [r for r, p in enumerate(processes) if p.exitcode != 0]
    if failed:
        raise SystemExit(f"bench_ddp: DDP ranks {failed} failed (exit codes "
                         f"{[processes[r].exitcode for r in failed]})")
    ranks = [torch.load(out / f"ddp_rank_{r}.pt") for r in range(args.world)]
    steps = slowest_rank_steps([r["step_s"] for r in ranks])
    return statistics.median(steps[1:]), ranks[0]["losses"]


# --- report -------------------------------------------------------------------------------------------------

def kinds_table(timing, steps, top_ops=12):
    """Milliseconds per step per instruction kind, averaged over ranks and steps 2..N, with their share of
    the ranks' mean step; then the op types costing most inside the compute kinds."""
    world = len(timing)
    measured = max(1, steps - 1)
    mean_step = statistics.fmean(s for rank in timing for s in rank["step_s"][1:])
    total = {}
    for rank in timing:
        for kind, (seconds, calls) in rank["kinds"].items():
            entry = total.setdefault(kind, [0.0, 0])
            entry[0] += seconds
            entry[1] += calls

    def rows(items):
        for kind, (seconds, calls) in sorted(items, key=lambda kv: -kv[1][0]):
            per_step = seconds / world / measured
            yield f"{kind:<42} {per_step * 1e3:>9.2f} {per_step / mean_step:>7.1%} {calls / world / measured:>10.1f}"

    kinds = [(k, v) for k, v in total.items() if ": " not in k]
    by_op = [(k, v) for k, v in total.items() if ": " in k]
    accounted = sum(s for _, (s, _) in kinds) / world / measured
    return "\n".join([f"{'instruction kind':<42} {'ms/step':>9} {'share':>7} {'calls/step':>10}", *rows(kinds),
                      f"{'(mean rank step)':<42} {mean_step * 1e3:>9.2f}  accounted {accounted / mean_step:.0%}",
                      f"\ncompute by op type (top {top_ops}):", *list(rows(by_op))[:top_ops]])


def side_by_side(loom_run, peer_run, peer, args, target=None):
    """Repeats Loom's run and the peer's back to back (alternating which goes first, so that a drift in the
    machine's load favours neither), prints each repeat's step times and ratio, the medians, the machine's
    load, and where Loom's step goes in the median repeat. loom_run() -> (seconds, losses, timing);
    peer_run() -> (seconds, losses)."""
    width = max(len(peer) + 3, 9)
    print(f"{'repeat':>6} | {'loom ms':>9} | {peer + ' ms':>{width}} | {'loom/' + peer:>{len(peer) + 5}}")
    load_before = os.getloadavg()
    rows = []
    for repeat in range(1, args.repeats + 1):
        if repeat % 2:
            loom_s, losses, timing = loom_run()
            peer_s, peer_losses = peer_run()
        else:
            peer_s, peer_losses = peer_run()
            loom_s, losses, timing = loom_run()
        rows.append((loom_s, peer_s, timing))
        print(f"{repeat:>6} | {loom_s * 1e3:>9.2f} | {peer_s * 1e3:>{width}.2f} | {loom_s / peer_s:>{len(peer) + 5}.3f}",
              flush=True)
    loom_med = statistics.median(r[0] for r in rows)
    peer_med = statistics.median(r[1] for r in rows)
    goal = f"   (target <= {target:.2f})" if target else ""
    print(f"{'median':>6} | {loom_med * 1e3:>9.2f} | {peer_med * 1e3:>{width}.2f} | "
          f"{loom_med / peer_med:>{len(peer) + 5}.3f}{goal}")
    print(f"\nloss, first -> last step: loom {losses[0]:.4f} -> {losses[-1]:.4f}; "
          f"{peer} {peer_losses[0]:.4f} -> {peer_losses[-1]:.4f} (different initial values: timing only)")
    paired = statistics.median(r[0] / r[1] for r in rows)
    print(f"median of the repeats' own ratios (each pair ran back to back): {paired:.3f}")
    print(f"machine load (1-minute average) {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after, "
          f"on {os.cpu_count()} cores: step times under load are noisy, compare the ratio of one run")
    median_run = sorted(rows, key=lambda r: r[0])[len(rows) // 2]
    print(f"\nwhere Loom's step goes (per rank, steps 2..{args.steps}, the median repeat):")
    print(kinds_table(median_run[2], args.steps))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loom", default=str(ROOT / "build" / "loom"), help="the engine binary")
    parser.add_argument("--out", default=str(ROOT / "build" / "run" / "bench_ddp"), help="working directory")
    parser.add_argument("--steps", type=int, default=10, help="AdamW steps per run (the first is left out)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--world", type=int, default=4, help="gloo processes")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16, help="global batch (split evenly over the processes)")
    args = parser.parse_args(argv)
    if not pathlib.Path(args.loom).is_file():
        print(f"bench_ddp: no engine binary at {args.loom}: build it or pass --loom", file=sys.stderr)
        return 1
    if args.steps < 2 or args.batch % args.world:
        print("bench_ddp: --steps must be >= 2 and --batch a multiple of --world", file=sys.stderr)
        return 1
    args.loom = str(pathlib.Path(args.loom).resolve())
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    graph = out / "gpt2.json"
    trace(args, graph)
    emit, command = plan(args, graph, out)
    args.adamw = plan_adamw(emit)
    print(f"GPT-2: {args.layers} layers, width {args.width}, {args.heads} heads, vocabulary {args.vocab}, "
          f"sequence {args.seq}, global batch {args.batch}, float32; {args.world} gloo processes, 1 thread each")
    print(f"planned: {command}")
    print(f"AdamW {args.adamw} (the plan's) on both sides")
    print(f"{args.steps} AdamW steps per run; step time = slowest rank, median of steps 2..{args.steps}\n")
    side_by_side(lambda: run_loom(emit, args, out / "loom_results"), lambda: run_ddp(args, out / "ddp_results"),
                 "DDP", args, target=1.10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
