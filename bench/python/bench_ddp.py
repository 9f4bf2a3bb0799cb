"""Loom's data-parallel step beside torch DistributedDataParallel, 4 gloo processes, and beside both the step
Loom's simulator predicts for the same plan on this machine. On a quiet box (`uptime` load below 0.5):
`PYTHONPATH=python .venv/bin/python bench/python/bench_ddp.py --loom build/loom` (add --json for the numbers).

A transformers GPT-2 (float32, from a config) is traced (`loom.trace`) and planned by the engine
(`loom plan --graph G --policy dp --gpus 4 --cluster CPU.json --profile DB --emit DIR --json`);
`loom.runtime.launch.train(DIR, N, timed=True)` runs N AdamW steps of the generated rank programs. The same
model runs N AdamW steps under torch.nn.parallel.DistributedDataParallel on 4 gloo processes
(torch.multiprocessing, the same per-rank batch, one thread per process as the runtime's ranks). A step's
time is the slowest rank's wall time of that step; the first step (process start, sub-op forms, DDP's bucket
setup) is left out: the median of steps 2..N. The pair runs --repeats times, alternating which goes first;
the table gives every repeat and the medians, then where Loom's step goes per instruction kind (summed over
ranks' steps 2..N, median repeat; "backward closed form" counts the backward sub-ops of the forms' BACKWARD and
FROM_OUTPUT tables, "backward autograd" those that run torch.autograd over their forward form).
Both sides run the same GEMMs, ~60 % of a rank's CPU time; the rest is where they differ (docs/codegen.md,
"Runtime CPU per step"). One difference is the process, not the program: Loom's rank processes keep the memory
a step frees (loom/runtime/allocator.py), DDP's run with glibc's defaults, which their start-up happens to raise
(100-1,800 page faults a step per rank where Loom's took 3,000-5,500 before).

The prediction (predicted_step.py; its "model" row under the medians, with its ratio to Loom's measured
median) comes from this machine, measured before the runs:
- links: `loom_profile.cluster` times gloo all-reduces among the 4 processes at several sizes and fits the
  simulator's α-β all-reduce price to them; the fitted α and β, each size's residual and two checks the fit
  did not see (p2p exchanges, all-reduces over pairs of ranks) are printed. It writes CPU.json: one node of 4 "GPUs" named cpu-1thread-of-4 with the fitted link;
- ops: `loom profile --graph G --policy dp --gpus 4 --device-name cpu-1thread-of-4` times the plan's
  sub-ops with the Python timer on one torch thread (OMP_NUM_THREADS=1), as each rank runs;
- oversubscription: 4 ranks on 2 cores compute about 2 x slower than one process alone. Not hidden and not
  a constant: the ops are timed under the same load (3 companion processes run the same timer over the same
  ops meanwhile), and the gloo links are measured with all 4 processes running. The step predicted from
  the ops timed alone is printed too, with the slowdown of compute the load caused.
Loom's run is the program the prediction prices: `loom plan --cluster CPU.json --layout-cluster P`, the
collectives chosen as on --plan-cluster P (default dgx-a100: DDP's bucketed all-reduce, the program every
earlier measurement ran) and the step predicted on this machine; --plan-cluster calibrated chooses them
with this machine's fitted links (about 1 ms a hop on gloo: pairs of all-reduces and exchanges instead).
Nothing here changes the plan or the generated code: this measures. (The runtime defers Adam(W) steps and runs
them as one multi-tensor call at the next other instruction: the "optimizer" row counts the deferral and the
copies of inputs the program does not donate (the first step's only, docs/codegen.md "In-place optimizer
steps"), the batched update itself shows in the row of the instruction that flushed it, `wait` or `keep`.)
"""

import argparse
import contextlib
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from loom_profile.cluster import run_ranks  # noqa: E402  (ranks started as the calibration starts its own)


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


def plan_adamw(emit):
    """torch.optim.AdamW's arguments from the plan's optimizer sub-ops, so both sides take the same step."""
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

def _ddp_worker(rank, port, args, out_dir):
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


def run_ddp(args, out):
    import torch
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch.distributed", "transformers"])
    failed = run_ranks(context, _ddp_worker, args.world, args, out)
    if failed:
        raise SystemExit(f"bench_ddp: DDP failed: {', '.join(failed)}")
    ranks = [torch.load(out / f"ddp_rank_{r}.pt") for r in range(args.world)]
    steps = slowest_rank_steps([r["step_s"] for r in ranks])
    return statistics.median(steps[1:]), ranks[0]["losses"]


# --- report -------------------------------------------------------------------------------------------------

def kinds_per_step(timing, steps):
    """Per instruction kind (and "kind: op type" inside the compute kinds): seconds and calls per rank and step,
    averaged over ranks and steps 2..N, and the ranks' mean step."""
    world = len(timing)
    measured = max(1, steps - 1)
    mean_step = statistics.fmean(s for rank in timing for s in rank["step_s"][1:])
    total = {}
    for rank in timing:
        for kind, (seconds, calls) in rank["kinds"].items():
            entry = total.setdefault(kind, [0.0, 0])
            entry[0] += seconds
            entry[1] += calls
    per_step = {kind: (seconds / world / measured, calls / world / measured) for kind, (seconds, calls) in total.items()}
    return dict(sorted(per_step.items(), key=lambda kv: -kv[1][0])), mean_step


def kinds_table(timing, steps, top_ops=12):
    """Milliseconds per step per instruction kind, averaged over ranks and steps 2..N, with their share of
    the ranks' mean step; then the op types costing most inside the compute kinds."""
    per_step, mean_step = kinds_per_step(timing, steps)

    def rows(items):
        for kind, (seconds, calls) in items:
            yield f"{kind:<42} {seconds * 1e3:>9.2f} {seconds / mean_step:>7.1%} {calls:>10.1f}"

    kinds = [(k, v) for k, v in per_step.items() if ": " not in k]
    by_op = [(k, v) for k, v in per_step.items() if ": " in k]
    accounted = sum(s for _, (s, _) in kinds)
    return "\n".join([f"{'instruction kind':<42} {'ms/step':>9} {'share':>7} {'calls/step':>10}", *rows(kinds),
                      f"{'(mean rank step)':<42} {mean_step * 1e3:>9.2f}  accounted {accounted / mean_step:.0%}",
                      f"\ncompute by op type (top {top_ops}):", *list(rows(by_op))[:top_ops]])


def side_by_side(loom_run, peer_run, peer, args, target=None, predicted_s=None):
    """Repeats Loom's run and the peer's back to back (alternating which goes first, so that a drift in the
    machine's load favours neither), prints each repeat's step times and ratio, the medians, the machine's
    load, and where Loom's step goes in the median repeat. loom_run() -> (seconds, losses, timing);
    peer_run() -> (seconds, losses). `predicted_s`, when given, is the simulator's step for Loom's plan,
    printed under the medians with its ratio to Loom's. Returns the numbers printed (SI units)."""
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
    if predicted_s is not None:
        print(f"{'model':>6} | {predicted_s * 1e3:>9.2f} | {'':>{width}} | {'':>{len(peer) + 5}}   "
              f"Loom's step as `loom plan` predicts it here: {predicted_s / loom_med:.3f} x the measured median, "
              f"{predicted_s / peer_med:.3f} x {peer}'s")
    print(f"\nloss, first -> last step: loom {losses[0]:.4f} -> {losses[-1]:.4f}; "
          f"{peer} {peer_losses[0]:.4f} -> {peer_losses[-1]:.4f} (different initial values: timing only)")
    paired = statistics.median(r[0] / r[1] for r in rows)
    print(f"median of the repeats' own ratios (each pair ran back to back): {paired:.3f}")
    load_after = os.getloadavg()
    print(f"machine load (1-minute average) {load_before[0]:.1f} before, {load_after[0]:.1f} after, "
          f"on {os.cpu_count()} cores: step times under load are noisy, compare the ratio of one run")
    median_run = sorted(rows, key=lambda r: r[0])[len(rows) // 2]
    print(f"\nwhere Loom's step goes (per rank, steps 2..{args.steps}, the median repeat):")
    print(kinds_table(median_run[2], args.steps))
    per_step, mean_step = kinds_per_step(median_run[2], args.steps)
    return {"repeats": [{"loom_s": r[0], "peer_s": r[1], "ratio": r[0] / r[1]} for r in rows],
            "median_loom_s": loom_med, "median_peer_s": peer_med, "ratio_of_medians": loom_med / peer_med,
            "median_paired_ratio": paired, "load_before": load_before[0], "load_after": load_after[0],
            "cores": os.cpu_count(), "loss_first": losses[0], "loss_last": losses[-1],
            "loom_kinds_per_step": {kind: {"seconds": s, "calls": c} for kind, (s, c) in per_step.items()},
            "loom_mean_rank_step_s": mean_step}


def predict(args, graph, out):
    """Calibrates this machine (links, ops under the ranks' load and alone) and plans the graph on it with
    the simulator: prints what it measured and predicts; returns (the `loom plan` command of the prediction,
    its --emit directory, the calibration's numbers)."""
    import predicted_step

    world = args.world
    directory = out / "calibration"
    print("calibrating this machine for the simulator (docs/profiling.md, \"Calibrating a CPU cluster\"):")
    links = predicted_step.calibrate_links(world, directory)
    print(predicted_step.calibration.format_report(links))
    cluster_file = pathlib.Path(links["cluster_file"])
    loaded, alone = directory / "ops_under_load.json", directory / "ops_alone.json"
    keys = predicted_step.profile_ops(args.loom, graph, world, loaded, companions=world - 1)
    predicted_step.profile_ops(args.loom, graph, world, alone, companions=0)
    print(f"ops: {keys} keys timed by `loom profile --graph G --policy dp --gpus {world} "
          f"--device-name {predicted_step.device_name(world)}` with 1 torch thread, under the ranks' load "
          f"({world - 1} companion processes timing the same ops) into {loaded.name}, and alone into {alone.name}")
    emit = out / "emit_predicted"
    layout = None if args.plan_cluster == "calibrated" else args.plan_cluster
    command = predicted_step.plan_command(args.loom, graph, world, cluster_file, loaded, out / "plan_predicted", emit,
                                          layout)
    under_load = predicted_step.summary(predicted_step.simulate(command))
    by_alone = predicted_step.summary(predicted_step.simulate(
        predicted_step.plan_command(args.loom, graph, world, cluster_file, alone, out / "plan_ops_alone",
                                    layout_cluster=layout)))
    slowdown = under_load["compute_s"] / by_alone["compute_s"]
    print(f"predicted: `{' '.join(command)}`")

    def split(p):
        return (f"step {p['step_time_s'] * 1e3:.2f} ms (device 0: compute {p['compute_s'] * 1e3:.2f}, exposed "
                f"communication {p['exposed_communication_s'] * 1e3:.2f}, idle {p['idle_s'] * 1e3:.2f} ms)")
    print(f"  ops timed under load: {split(under_load)}")
    print(f"  ops timed alone:      {split(by_alone)}")
    print(f"  the ranks' load makes compute {slowdown:.2f} x slower ({world} processes on {os.cpu_count()} cores: "
          f"{world / os.cpu_count():.2f}); the prediction uses the times under load\n")
    return command, emit, {"cluster_file": str(cluster_file), "device_name": predicted_step.device_name(world),
                           "links": links, "ops_keys": keys, "ops_database": str(loaded),
                           "ops_database_alone": str(alone), "command": " ".join(command),
                           "predicted": under_load, "predicted_ops_alone": by_alone, "load_slowdown": slowdown}


def bench(args):
    """The whole benchmark, printed as text; returns its numbers (SI units) for --json."""
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    graph = out / "gpt2.json"
    trace(args, graph)
    print(f"GPT-2: {args.layers} layers, width {args.width}, {args.heads} heads, vocabulary {args.vocab}, "
          f"sequence {args.seq}, global batch {args.batch}, float32; {args.world} gloo processes, 1 thread each")
    prediction_command, emit, calibration = predict(args, graph, out)
    command = " ".join(prediction_command)
    args.adamw = plan_adamw(emit)
    print(f"planned and run: {command}")
    print(f"AdamW {args.adamw} (the plan's) on both sides")
    print(f"{args.steps} AdamW steps per run; step time = slowest rank, median of steps 2..{args.steps}\n")
    measured = side_by_side(lambda: run_loom(emit, args, out / "loom_results"), lambda: run_ddp(args, out / "ddp_results"),
                            "DDP", args, target=1.05, predicted_s=calibration["predicted"]["step_time_s"])
    measured["median_ddp_s"] = measured.pop("median_peer_s")
    for row in measured["repeats"]:
        row["ddp_s"] = row.pop("peer_s")
    return {"schema": "loom.bench_ddp/1",
            "model": {"layers": args.layers, "width": args.width, "heads": args.heads, "vocab": args.vocab,
                      "seq": args.seq, "global_batch": args.batch, "dtype": "f32"},
            "world": args.world, "steps": args.steps, "plan_command": command, "plan_cluster": args.plan_cluster,
            "calibration": calibration, "measured": measured,
            "predicted_over_measured_loom": calibration["predicted"]["step_time_s"] / measured["median_loom_s"]}


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
    parser.add_argument("--plan-cluster", default="dgx-a100",
                        help="the cluster whose links choose the run's collectives (--layout-cluster): a preset or "
                             "cluster file, or calibrated (this machine's fitted links); the step is predicted on "
                             "this machine either way, for the program that runs")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON document on stdout "
                        "(the text goes to stderr)")
    args = parser.parse_args(argv)
    if not pathlib.Path(args.loom).is_file():
        print(f"bench_ddp: no engine binary at {args.loom}: build it or pass --loom", file=sys.stderr)
        return 1
    if args.steps < 2 or args.batch % args.world or args.world < 2:
        print("bench_ddp: --steps must be >= 2, --world >= 2 and --batch a multiple of --world", file=sys.stderr)
        return 1
    args.loom = str(pathlib.Path(args.loom).resolve())
    if not args.json:
        bench(args)
        return 0
    with contextlib.redirect_stdout(sys.stderr):
        result = bench(args)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
