"""Oases' overlap on gloo: a tensor-parallel step of Loom's generated programs with and without `--overlap
oases`, 2 processes of one torch thread each, and where the collectives' time went. On a quiet box (`uptime`
load below 0.5): `PYTHONPATH=python:build/python .venv/bin/python bench/python/bench_oases.py --loom build/loom`
(add --json for the numbers).

A zoo GPT (float32, `--layers`, `--seq`, `--batch`) is planned tp 2 on 2 ranks (`loom plan --emit DIR`), once
as Megatron (blocking all-reduces of the activations, forward and backward) and once with `--overlap oases`
(each rank's batch as 2 sub-batches, Algorithm 1's order, the activation all-reduces started after their
writer and waited for before their reader: docs/overlap.md). `loom.runtime.launch.train(DIR, N, timed=True)`
runs N steps; a step's time is the slowest rank's, the first step (process start, forms) left out: the median
of steps 2..N. The pair runs --repeats times, alternating which goes first.

What the overlap hid: blocking, the rank's compute stream is held for every all-reduce ("all_reduce" seconds:
the whole collective, waiting for the peer included); overlapped, it is held only at the waits ("wait"
seconds: what of the collective was not done when its reader came) plus the issue of each start
("all_reduce_start"). The ratio hidden = 1 - (start + wait) / all_reduce is printed per repeat.

When each collective ran: the runtime records the last step's spans per rank (runtime/timeline.py; an
asynchronous all-reduce's span lasts from its issue until gloo's thread completed it), and the compute inside
the collectives' spans over their length is printed per run ("compute beside them"): 0 for blocking
collectives, the share of the collective's flight that the rank spent computing for overlapped ones.

What limits it here: gloo runs a collective on the calling process's own threads, on the same 2 cores the
ranks compute on (2 ranks, 2 cores: no core is idle for communication), so an all-reduce in flight competes
with the compute beside it rather than running on a NIC or an NVLink copy engine; and halving the batch
halves each GEMM, whose per-call overhead then counts twice. The simulator's contention factor (docs/overlap.md)
is this slowdown; the job prices with none.

On a GPU, in two phases (the engine plans here; the GPU machine has CUDA torch but not the engine):
`bench_oases.py --emit-only DIR` plans the pair into DIR; `bench_oases.py --ranks DIR --device cuda
--backend gloo` runs them there. NCCL refuses two ranks on one GPU, so on a one-GPU machine the pair runs on
gloo with CUDA tensors (each collective staged through the host by gloo's threads while the GPU computes);
`--backend nccl` needs a GPU per rank. On a GPU the kinds' seconds are the host's (kernels run asynchronously),
so the step times, synchronized at each step's end, are the comparison; the losses of the two plans are printed
side by side (the overlapped program computes the same step).
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


def plan(args, directory, overlap):
    command = [args.loom, "plan", "--model", args.model, "--layers", str(args.layers), "--seq", str(args.seq),
               "--global-batch", str(args.batch), "--dtype", "f32", "--policy", "megatron", "--tp", "2", "--gpus", "2",
               "--overlap", overlap, "--out", str(directory / "out"), "--emit", str(directory / "ranks")]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return directory / "ranks"


def run(ranks, steps, out, device="cpu", backend=None):
    from loom.runtime import launch
    losses, _ = launch.train(ranks, steps, out=out, timed=True, device=device, backend=backend)
    timing = launch.read_timing(out)
    step = statistics.median(max(rank["step_s"][s] for rank in timing) for s in range(1, steps))
    kinds = {}
    for rank in timing:
        for kind, (seconds, calls) in rank["kinds"].items():
            if ":" in kind:
                continue  # the per-op-type rows: their kind's row sums them
            kinds.setdefault(kind, [0.0, 0])
            kinds[kind][0] += seconds / len(timing) / (steps - 1)  # a rank's, per step
            kinds[kind][1] = calls // (steps - 1)
    from loom.runtime.timeline import overlap
    per_rank = [overlap(rank["timeline"]) for rank in timing]  # the last step's spans
    beside = {key: statistics.mean(r[key] for r in per_rank) for key in ("collective_s", "compute_beside_s")}
    beside["ratio"] = beside["compute_beside_s"] / beside["collective_s"] if beside["collective_s"] else 0.0
    return {"step_s": step, "kinds": kinds, "losses": losses, "overlap": beside, "spans_rank0": timing[0]["timeline"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loom", default=str(ROOT / "build" / "loom"))
    parser.add_argument("--model", default="gpt3-125m")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--emit-only", metavar="DIR", help="plan the pair into DIR/{megatron,oases} and stop")
    parser.add_argument("--ranks", metavar="DIR", help="run the pair planned by --emit-only DIR (no planning)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--backend", choices=["gloo", "nccl"], help="default: nccl on cuda, gloo on cpu")
    parser.add_argument("--replay", metavar="FILE", help="print the tables of a saved --json document")
    args = parser.parse_args()
    if args.replay:
        saved = json.loads(pathlib.Path(args.replay).read_text())
        vars(args).update({k: v for k, v in saved["args"].items() if k not in ("replay", "json")})
        print_tables(args, saved["results"])
        return
    results = {"megatron": [], "oases": []}
    shape = ("model", "layers", "seq", "batch")
    if args.emit_only:
        for name in results:
            plan(args, pathlib.Path(args.emit_only) / name, "none" if name == "megatron" else name)
        (pathlib.Path(args.emit_only) / "job.json").write_text(json.dumps({k: getattr(args, k) for k in shape}))
        return
    if args.ranks:  # the job the pair was planned for, not this call's defaults
        vars(args).update(json.loads((pathlib.Path(args.ranks) / "job.json").read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        if args.ranks:
            ranks = {name: pathlib.Path(args.ranks) / name / "ranks" for name in results}
        else:
            ranks = {name: plan(args, tmp / name, "none" if name == "megatron" else name) for name in results}
        for r in range(args.repeats):
            order = list(results) if r % 2 == 0 else list(reversed(results))
            for name in order:
                results[name].append(run(ranks[name], args.steps, tmp / name / f"run{r}", args.device, args.backend))
    if args.json:
        print(json.dumps({"args": vars(args), "results": results}, indent=1))
        return
    print_tables(args, results)


def print_tables(args, results):
    backend = args.backend or ("nccl" if args.device == "cuda" else "gloo")
    print(f"{args.model} L{args.layers} seq {args.seq} batch {args.batch}, tp 2 on 2 {backend} ranks ({args.device}), "
          f"{args.steps} steps x {args.repeats} repeats (median step 2..N, slowest rank)")
    print(f"{'repeat':>6} {'megatron s':>11} {'oases s':>9} {'speedup':>8} {'all_reduce s':>13} {'start+wait s':>13} "
          f"{'hidden':>7}")
    for r in range(args.repeats):
        m, o = results["megatron"][r], results["oases"][r]
        blocking = m["kinds"]["all_reduce"][0]
        exposed = o["kinds"]["all_reduce_start"][0] + o["kinds"]["wait"][0]
        print(f"{r:>6} {m['step_s']:>11.4f} {o['step_s']:>9.4f} {m['step_s'] / o['step_s']:>8.3f} {blocking:>13.4f} "
              f"{exposed:>13.4f} {1 - exposed / blocking if blocking else 0:>7.2f}")
    for name, runs in results.items():
        print(f"  losses {name:<9} " + " ".join(f"{loss:.7g}" for loss in runs[0]["losses"]))
    for name, runs in results.items():
        if all("overlap" in x for x in runs):  # saved before the timeline existed: absent
            print(f"  {name:<9} collectives in flight (last step, mean of ranks): " + "; ".join(
                f"{x['overlap']['collective_s'] * 1e3:.1f} ms, compute beside them {x['overlap']['compute_beside_s'] * 1e3:.1f}"
                f" ms ({x['overlap']['ratio']:.0%})" for x in runs))
    med = {name: statistics.median(x["step_s"] for x in runs) for name, runs in results.items()}
    print(f"median step: megatron {med['megatron']:.4f} s, oases {med['oases']:.4f} s, "
          f"speedup {med['megatron'] / med['oases']:.3f}")
    for name, runs in results.items():
        kinds = runs[len(runs) // 2]["kinds"]
        print(f"  {name:<9} " + ", ".join(f"{k} {v[0]:.4f} s ({v[1]} calls)" for k, v in kinds.items() if v[1]))


if __name__ == "__main__":
    main()
