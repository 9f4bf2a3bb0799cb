"""nnScaler (OSDI '24) Fig. 8, T5 with the interlaced pipeline, predicted by Loom's simulator:
`.venv/bin/python bench/papers/nnscaler_fig8_t5.py --loom build/loom [--json] [--replay FILE]`.

Each cell is one Table 9 preset on its GPU count (t5-3.9b/4, t5-11b/8, t5-21b/16, t5-47b/32) on DGX-2 (`dgx2`,
`dgx2x2` for 32). Every plan uses layer-wise recompute (`--recompute full`: §8.1 applies it in all experiments),
fp16 (V100 has no bf16 path), a global batch of 32 samples, and mT5's vocabulary of 250,112 tokens (`--vocab`):
the paper cites T5 and mT5 [45, 62] and names a 12 GB embedding in the 21B model, which is 250,112 x 4096
parameters at 12 bytes each (fp32 weight and Adam's two moments); T5's own 32,128 would make the table 0.4 GB.
Pipelines run 8 micro-batches (2 x pp for nnScaler), the others one (no gradient accumulation). Every plan is
explicit (`--fold off`): the interlaced plan does not fold, and a folded plan would be priced by another path.
The systems, with the plans §8.3.3 states:
- nnScaler: `--policy interlaced`, pp 4, tp 1/2/4/8 per stage, the embedding and head over all GPUs (no ZeRO);
- Megatron-LM: tp 2 x pp 2 on 4 GPUs, pure tp (tp = GPUs) beyond;
- Alpa: 3 stages with a 2-way middle stage on 4 GPUs, pure tp beyond, replicating norms and dropouts. Loom's
  stages share one tp degree and its tp already replicates norms and dropouts, so Alpa is priced as Megatron-LM's
  plan in every cell (one column "Megatron/Alpa"); the paper's Alpa beats Megatron-LM at 32 GPUs, which this
  cannot show;
- DeepSpeed: ZeRO-3 with dp 4 on 4 GPUs; tp 4 with ZeRO-3, ZeRO-Offload of the optimizer and the parameters
  (`--offload optimizer+params`: §8.3.3, "with ZeRO-Offload and ZeRO stage3 applied", whose offloaded embedding
  weights it names) and dp for the rest beyond.
Throughput is aggregate effective TFLOPS (model FLOPs per step over the predicted step). The paper's numbers are
those its text states: nnScaler over DeepSpeed 1.5x, 1.6x, 2.5x on 8, 16, 32 GPUs, nnScaler the winner there,
DeepSpeed the winner on 4 GPUs.
"""

import datetime
import json
import sys

import loom_plan

CELLS = [(4, "t5-3.9b", 1), (8, "t5-11b", 2), (16, "t5-21b", 4), (32, "t5-47b", 8)]  # GPUs, preset, nnScaler's tp
PIPELINE_STAGES = 4
PAPER_SPEEDUP = {8: 1.5, 16: 1.6, 32: 2.5}
PAPER_WINNER = {4: "DeepSpeed", 8: "nnScaler", 16: "nnScaler", 32: "nnScaler"}
GLOBAL_BATCH = 32
MT5_VOCAB = 250112
PIPELINE_MICRO_BATCHES = 8
COMMON = ["--recompute", "full", "--dtype", "f16", "--global-batch", str(GLOBAL_BATCH), "--vocab", str(MT5_VOCAB),
          "--fold", "off"]
BAND = 0.30
SYSTEMS = ["nnScaler", "Megatron/Alpa", "DeepSpeed"]


def plans(gpus, tp):
    """The stated plan of each system on `gpus` GPUs: {system: loom flags}."""
    pipeline = ["--microbatches", str(PIPELINE_MICRO_BATCHES)]
    whole = ["--microbatches", "1"]
    megatron = (["--policy", "megatron", "--tp", "2", "--pp", "2", *pipeline] if gpus == 4
                else ["--policy", "megatron", "--tp", str(gpus), *whole])
    deepspeed = (["--policy", "megatron", "--zero", "3", "--dp", "4", *whole] if gpus == 4
                 else ["--policy", "megatron", "--zero", "3", "--tp", "4", "--dp", str(gpus // 4), *whole,
                       "--offload", "optimizer+params"])
    return {"nnScaler": ["--policy", "interlaced", "--pp", str(PIPELINE_STAGES), "--tp", str(tp), *pipeline],
            "Megatron/Alpa": megatron, "DeepSpeed": deepspeed}


def cluster_of(gpus):
    return ["--cluster", "dgx2", "--gpus", str(gpus)] if gpus <= 16 else ["--cluster", f"dgx2x{gpus // 16}"]


def measure(loom, gpus, model, tp, timeout):
    cluster = cluster_of(gpus)
    row = {"gpus": gpus, "model": model, "cluster": " ".join(cluster), "systems": {}}
    for system, flags in plans(gpus, tp).items():
        result = loom_plan.run_plan(loom, ["--model", model, *cluster, *flags, *COMMON], timeout)
        result["flags"] = " ".join(flags)
        what = loom_plan.progress_text(result)
        print(f"  {system:<14} {result['flags']:<70} {what} (planned in {result['wall_s']:.1f} s)", file=sys.stderr,
              flush=True)
        row["systems"][system] = result
    return row


def fits(r):
    return r is not None and "error" not in r and not r["oom"]


def judge(row):
    """The winner among the plans that fit, nnScaler's speedup over DeepSpeed, and why a cell leaves the band."""
    systems = row["systems"]
    nn, ds = systems["nnScaler"], systems["DeepSpeed"]
    fitting = {n: r for n, r in systems.items() if fits(r)}
    row["winner"] = max(fitting, key=lambda n: fitting[n]["tflops"]) if fitting else "none fits"
    row["paper_winner"] = PAPER_WINNER[row["gpus"]]
    row["paper_speedup"] = PAPER_SPEEDUP.get(row["gpus"])
    priced = "error" not in nn and "error" not in ds
    row["speedup"] = nn["tflops"] / ds["tflops"] if priced else None
    row["speedup_over_capacity"] = priced and not (fits(nn) and fits(ds))
    paper = row["paper_speedup"]
    row["in_band"] = None if paper is None else (
        row["speedup"] is not None and abs(row["speedup"] / paper - 1) <= BAND)
    reasons = []
    for name, r in systems.items():
        if "error" in r:
            reasons.append(f"{name}'s plan is refused ({r['error']})")
        elif r["oom"]:
            reasons.append(f"{name}'s plan is over capacity in Loom ({r['peak_gib']:.1f} GiB peak of 32)")
    if row["speedup"] is not None:
        reasons.append(
            f"on its peak-memory device DeepSpeed computes {ds['compute_s']:.1f} s, exposes {ds['exposed_comm_s']:.1f} s "
            f"of communication and idles {ds['idle_s']:.1f} s of {ds['step_s']:.1f} s; nnScaler computes "
            f"{nn['compute_s']:.1f} s, exposes {nn['exposed_comm_s']:.1f} s and idles {nn['idle_s']:.1f} s of "
            f"{nn['step_s']:.1f} s")
    row["reason"] = "; ".join(reasons)


def print_table(rows, started):
    print(f"nnScaler Fig. 8 (T5, interlaced pipeline) in Loom's simulator, {started:%Y-%m-%d %H:%M} UTC")
    print(f"\n## DGX-2 (fp16, global batch {GLOBAL_BATCH}, vocabulary {MT5_VOCAB}, full recompute, --fold off)")
    print("| GPUs | model | " + " | ".join(f"{n}: plan / step s / TFLOPS / peak GiB" for n in SYSTEMS)
          + " | nnScaler / DeepSpeed (Loom) | paper | winner (Loom) | paper winner | planned in (s) |")
    print("|" + "---|" * (len(SYSTEMS) + 7))
    for row in rows:
        cells = []
        for n in SYSTEMS:
            r = row["systems"][n]
            cells.append(loom_plan.system_cell(r, f"`{r['flags']}`"))
        speedup = f"{row['speedup']:.2f}x" if row["speedup"] else "n/a"
        if row["speedup_over_capacity"]:
            speedup += " (a plan over capacity)"
        paper = f"{row['paper_speedup']}x" if row["paper_speedup"] else "not stated"
        walls = " / ".join(f"{row['systems'][n]['wall_s']:.0f}" for n in SYSTEMS)
        print(f"| {row['gpus']} | {row['model']} | " + " | ".join(cells)
              + f" | {speedup} | {paper} | {row['winner']} | {row['paper_winner']} | {walls} |")
    same = sum(1 for r in rows if r["winner"] == r["paper_winner"])
    judged = [r for r in rows if r["paper_speedup"]]
    in_band = sum(1 for r in judged if r["in_band"])
    print(f"\nSame winner as the paper: {same} of {len(rows)} cells; speedup within ±{BAND:.0%} of the paper's: "
          f"{in_band} of {len(judged)} ({in_band / max(len(judged), 1):.0%}).")
    for row in rows:
        if row["winner"] != row["paper_winner"] or row["in_band"] is False:
            print(f"- {row['gpus']} GPUs ({row['model']}): {row['reason']}")


def main():
    parser = loom_plan.paper_arguments(__doc__, timeout=900)
    parser.add_argument("--gpus", default="4,8,16,32", help="the cells to plan, by GPU count")
    args = parser.parse_args()
    if args.replay:
        saved, started = loom_plan.read_saved(args.replay)
        rows = saved["rows"]
    else:
        started, rows = datetime.datetime.now(datetime.timezone.utc), []
        wanted = {int(g) for g in args.gpus.split(",")}
        for gpus, model, tp in CELLS:
            if gpus in wanted:
                print(f"dgx2 {gpus} GPUs {model}", file=sys.stderr, flush=True)
                rows.append(measure(args.loom, gpus, model, tp, args.timeout))
    for row in rows:
        judge(row)
    if args.json:
        print(json.dumps({"date": started.isoformat(timespec="seconds"), "rows": rows}, indent=2))
        return
    print_table(rows, started)


if __name__ == "__main__":
    main()
