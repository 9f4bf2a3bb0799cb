"""SuperScaler Fig. 12(b) GPT-3 (sequence 16384) and Fig. 12(c) mBART, predicted by Loom's simulator:
`.venv/bin/python bench/papers/superscaler_fig12.py --loom build/loom [--json] [--replay FILE]`.

Weak scaling on SuperScaler's cluster (§6.1: 8 V100-32GB per server over NVLink, 100 Gb/s InfiniBand between
servers: Loom's `v100x8`, `--gpus 4` for 4 GPUs, `v100x8x2` / `v100x8x4` for 16 / 32), one Table 2 preset per
GPU count: GPT-3 gpt3-1.3b-16k / 2.6b-16k / 6.7b-16k / 15b-16k (Table 2's layers, hidden and 32 heads, seq
16384, vocabulary 50257) and mBART mbart-4.7b / 9.5b / 20b / 32b (vocabulary 500k, seq 1024). Every plan: fp16
(V100 has no bf16 path), layer-wise recompute (`--recompute full`; the paper enables it "when necessary", and
at seq 16k every plan that holds its layers' scores needs it), micro-batches of one sample. On GPT-3 the columns
also try Megatron-LM's selective recompute (`--recompute selective`: on eager attention the core attention, q kᵀ
to the context, runs again in backward, so no [b, heads, s, s] tensor stays saved; Korthikanti et al. 2022),
Megatron-LM's and DeepSpeed's tp x ZeRO-3 plans (which use Megatron-LM's layers) as SuperScaler's coshard plans,
and the coshard plans also `--recompute none` (coshard recomputes each part itself, and under the layer-wise
recompute each part's forward runs three times). The global batch is 32 samples, not the paper's
512: at 512 the unfoldable plans (coshard, ZeRO-3, interlaced) exceed Loom's explicit-plan limit or take
minutes each; the speedups are ratios of steps that scale with the batch, except the pipeline bubble, which is
smaller at 512 (32 micro-batches per pipeline here). Each system is the fastest plan that fits of its column's
candidates (the paper tunes each system's degrees and micro-batch size):
- SuperScaler on GPT-3: coshard 4 on every layer (attention and MLP, `--coshard 4`), tp 2/4/8 inside a server,
  pp 1/2, dp the rest (the paper states tp 8 for 15B only);
- SuperScaler on mBART: `--policy interlaced` (embeddings and head over all GPUs, layers staged) with tp 4/8
  per stage (`--fold off`: it does not fold), and pure tp (tp = GPUs), the plan the paper says it ends with on
  4 and 8 GPUs. Every megatron plan is folded (`--fold on`): unfolded, Loom's gradient accumulation peaks far
  higher (mbart-4.7b tp 4: 100.7 GiB unfolded, 22.7 GiB folded) and prices the step by another path (5.94 s
  against 5.40 s), so interlaced and megatron plans on mBART are priced ~10 % apart by that alone;
- Megatron-LM: `--policy megatron` over tp 2..GPUs and pp 1/2 (GPT-3) or tp 4..GPUs and pp 1/2/4 (mBART).
  Loom's `megatron-best` is not used: it took over 300 s on one GPT-3 cell. Alpa (GPT-3 only) is this same
  column: Loom has no Alpa search and its stages share one tp degree; the paper says Megatron-LM and Alpa
  "achieve similar performance" and need the same 16-way tp for 15B;
- DeepSpeed: `--policy deepspeed-best` (Loom's grid of ZeRO-1/2/3 over dp = GPUs) and the paper's DeepSpeed,
  tp 2..8 with ZeRO-3 over the rest (§6.1: ZeRO-3 "is not compatible with pipeline parallelism. Therefore, we
  resort to its compatible tensor-parallelism and ZeRO data-parallelism"); where none of those fits, ZeRO-3 with
  `--offload optimizer+params` over tp 1..8 (§6.1: "we enable it only when memory is insufficient under
  ZeRO-3"). The offload is this script's grid, not deepspeed-best's: a search candidate carries no offload
  (search::Candidate), and the paper's rule (offload only when ZeRO-3 does not fit) is a rule of its tuning.
Every column runs the same model, Megatron-LM v3.0.x's (the paper's systems all ran it: SuperScaler's plans
transform that PyTorch model, Alpa's and DeepSpeed's baselines train the same GPT), so the attention form is
the figure's, not the column's (`--attention megatron`, the default): GPT-3 at s = 16384 is `eager-fp32`
(Megatron-LM v3.0.x's fused scale-mask-softmax takes key lengths up to 4096 only; above, its torch path casts
the 16-bit scores to fp32, scales, masks and softmaxes them in fp32, casts back, then dropout), mBART at s =
1024 is `eager` (the fused softmax kernel, whose 16-bit scores and probabilities are held as the eager ops').
`--attention fused|eager|eager-fp32` prices every figure with that form instead (fused: flash-style, the
scores never held).
The paper's numbers are those its text states (the bars are not in our copy): GPT-3, SuperScaler up to 3.3x over
Alpa and up to 1.5x over DeepSpeed; mBART, up to 2.8x over Megatron-LM and 4.9x over DeepSpeed, and the same as
Megatron-LM (1.0x) on 4 and 8 GPUs. "Up to" is judged against Loom's largest speedup over the cells. The
paper's winner is SuperScaler in every row (§6.2: "compared to existing baselines"), tied with Megatron-LM on
mBART's 4 and 8 GPUs; a tie here is two systems within 2 %.
"""

import datetime
import json
import os
import subprocess
import sys

import loom_plan

GLOBAL_BATCH = 32
COMMON = ["--dtype", "f16", "--global-batch", str(GLOBAL_BATCH), "--micro-batch-size", "1"]
FULL_RECOMPUTE = ["--recompute", "full"]
# Megatron-LM's selective recompute (its core attention only), tried on GPT-3 by every column that runs
# Megatron-LM's layers.
SELECTIVE_RECOMPUTE = ["--recompute", "selective"]
LAYER_RECOMPUTE = [FULL_RECOMPUTE, SELECTIVE_RECOMPUTE]
# Coshard recomputes each of its parts itself: under the layer-wise recompute too, each part's forward runs three
# times (nested recomputation), so SuperScaler's coshard plans are also tried without recomputation beyond
# coshard's own (none), and with the layers' memory-bound ops recomputed (memory-bound: SuperScaler recomputes per
# op; beside coshard's own rerun of the core attention, selective equals none).
COSHARD_RECOMPUTE = [*LAYER_RECOMPUTE, ["--recompute", "none"], ["--recompute", "memory-bound"]]
BAND = 0.30
TIE = 0.02
STARTING_LOAD = round(os.getloadavg()[0], 2)  # the 1-minute load average when the script started
# Megatron plans (no ZeRO) fold: unfolded, Loom's gradient accumulation peaks far higher (mbart-4.7b tp 4:
# 100.7 GiB unfolded, 22.7 GiB folded; gpt3-2.6b-16k coshard tp 2 dp 4: 37.0 and 29.6 GiB), which `auto` hits.
FOLD = ["--fold", "on"]
SYSTEMS = ["SuperScaler", "Megatron/Alpa", "DeepSpeed"]
FIGURES = {
    "gpt3": {"title": "Fig. 12(b) GPT-3, sequence 16384",
             # Megatron-LM v3.0.x above 4096 keys: the torch softmax path in fp32 (module docstring)
             "attention": "eager-fp32",
             "cells": [(4, "gpt3-1.3b-16k"), (8, "gpt3-2.6b-16k"), (16, "gpt3-6.7b-16k"), (32, "gpt3-15b-16k")],
             # (baseline, paper's largest speedup of SuperScaler over it, the cells it applies to: None = any)
             "paper": [("Megatron/Alpa", 3.3, None), ("DeepSpeed", 1.5, None)],
             "ties": {}},
    "mbart": {"title": "Fig. 12(c) mBART, vocabulary 500k",
              # 1024 keys: Megatron-LM's fused scale-mask-softmax kernel, 16-bit scores held
              "attention": "eager",
              "cells": [(4, "mbart-4.7b"), (8, "mbart-9.5b"), (16, "mbart-20b"), (32, "mbart-32b")],
              "paper": [("Megatron/Alpa", 2.8, None), ("DeepSpeed", 4.9, None),
                        ("Megatron/Alpa", 1.0, 4), ("Megatron/Alpa", 1.0, 8)],
              "ties": {4: "Megatron/Alpa", 8: "Megatron/Alpa"}},
}


def degrees(lo, hi):
    d = lo
    while d <= hi:
        yield d
        d *= 2


def candidates(figure, gpus):
    """Each system's candidate plans on `gpus` GPUs: {system: [loom flags]}."""
    if figure == "gpt3":
        superscaler = [["--policy", "megatron", "--coshard", "4", "--tp", str(tp), "--pp", str(pp), *FOLD, *recompute]
                       for tp in degrees(2, min(gpus, 8)) for pp in (1, 2) if tp * pp <= gpus
                       for recompute in COSHARD_RECOMPUTE]
        megatron = [["--policy", "megatron", "--tp", str(tp), "--pp", str(pp), *FOLD, *recompute]
                    for tp in degrees(2, gpus) for pp in (1, 2) if tp * pp <= gpus for recompute in LAYER_RECOMPUTE]
        zero3_recompute = LAYER_RECOMPUTE
    else:
        # the interlaced plan does not fold
        superscaler = [["--policy", "interlaced", "--tp", str(tp), "--pp", str(gpus // tp), "--fold", "off",
                        *FULL_RECOMPUTE] for tp in (4, 8) if gpus // tp >= 2]
        superscaler += [["--policy", "megatron", "--tp", str(gpus), *FOLD, *FULL_RECOMPUTE]]
        megatron = [["--policy", "megatron", "--tp", str(tp), "--pp", str(pp), *FOLD, *FULL_RECOMPUTE]
                    for tp in degrees(4, gpus) for pp in (1, 2, 4) if tp * pp <= gpus]
        zero3_recompute = [FULL_RECOMPUTE]
    # DeepSpeed: Loom's deepspeed-best (ZeRO-1/2/3 over dp = GPUs) and the paper's tp with ZeRO-3 dp
    deepspeed = [["--policy", "deepspeed-best", *FULL_RECOMPUTE]] + [
        zero3(tp, recompute) for tp in degrees(2, min(gpus // 2, 8)) for recompute in zero3_recompute]
    return {"SuperScaler": superscaler, "Megatron/Alpa": megatron, "DeepSpeed": deepspeed}


def zero3(tp, recompute=FULL_RECOMPUTE):
    return ["--policy", "megatron", "--zero", "3", "--tp", str(tp), *recompute]


def fallbacks(gpus):
    """Each system's plans tried only when none of its candidates fits: DeepSpeed's ZeRO-Offload of the optimizer
    states and the parameter shards (§6.1: "we enable it only when memory is insufficient under ZeRO-3"), over
    tp 1..8 inside a server."""
    return {"DeepSpeed": [[*zero3(tp), "--offload", "optimizer+params"] for tp in degrees(1, min(gpus, 8))]}


def cluster_of(gpus):
    return ["--cluster", "v100x8", "--gpus", str(gpus)] if gpus <= 8 else ["--cluster", f"v100x8x{gpus // 8}"]


def fits(r):
    return r is not None and "error" not in r and not r["oom"]


def best_of(tried):
    """The fastest plan that fits; else the one with the least peak memory (reported as over capacity)."""
    fitting = [r for r in tried if fits(r)]
    if fitting:
        return min(fitting, key=lambda r: r["step_s"])
    priced = [r for r in tried if "error" not in r]
    return min(priced, key=lambda r: r["peak_gib"]) if priced else tried[0]


def measure(loom, figure, gpus, model, timeout, attention, recompute_collectives):
    cluster = cluster_of(gpus)
    row = {"gpus": gpus, "model": model, "cluster": " ".join(cluster), "systems": {}, "tried": {}}
    spare = fallbacks(gpus)
    for system, plans in candidates(figure, gpus).items():
        tried = []
        for flags in plans + [None] + spare.get(system, []):
            if flags is None:  # the fallbacks, only where nothing fitted
                if any(fits(r) for r in tried):
                    break
                continue
            result = loom_plan.run_plan(loom, ["--model", model, *cluster, *flags, *COMMON, "--attention", attention,
                                               *(["--recompute-collectives"] if recompute_collectives else [])],
                                        timeout)
            result["flags"] = " ".join(flags)
            what = loom_plan.progress_text(result)
            if "error" not in result:
                what = f"{result['plan']}: {what}"
            print(f"  {system:<14} {result['flags']:<50} {what} (planned in {result['wall_s']:.1f} s)",
                  file=sys.stderr, flush=True)
            tried.append(result)
        row["tried"][system] = tried
        row["systems"][system] = best_of(tried)
    return row


def judge(figure, row):
    """The row's winner among the plans that fit and SuperScaler's speedup over each baseline."""
    systems = row["systems"]
    fitting = {n: r for n, r in systems.items() if fits(r)}
    if fitting:
        top = max(fitting, key=lambda n: fitting[n]["tflops"])
        tied = sorted(n for n in fitting if n != top and fitting[n]["tflops"] >= fitting[top]["tflops"] * (1 - TIE))
        row["winner"] = " = ".join([top, *tied])
    else:
        row["winner"] = "none fits"
    tie = FIGURES[figure]["ties"].get(row["gpus"])
    row["paper_winner"] = f"SuperScaler = {tie}" if tie else "SuperScaler"
    row["same_winner"] = (fits(systems["SuperScaler"]) and set(row["winner"].split(" = ")) ==
                          set(row["paper_winner"].split(" = ")))
    ss = systems["SuperScaler"]
    row["speedup"] = {}
    for name in SYSTEMS[1:]:
        base = systems[name]
        row["speedup"][name] = (ss["tflops"] / base["tflops"] if fits(ss) and fits(base) else None)


def explain(name, r):
    return (f"{name} (`{r['flags']}` -> {r['plan']}) computes {r['compute_s']:.1f} s, exposes "
            f"{r['exposed_comm_s']:.1f} s of communication and idles {r['idle_s']:.1f} s of {r['step_s']:.1f} s, "
            f"peak {r['peak_gib']:.1f} GiB")


def paper_checks(figure, rows):
    """Each stated speedup beside Loom's: the largest over the cells for "up to", else the named cell's."""
    checks = []
    for base, paper, gpus in FIGURES[figure]["paper"]:
        picked = [r for r in rows if (gpus is None or r["gpus"] == gpus) and r["speedup"][base] is not None]
        if not picked:
            checks.append({"baseline": base, "paper": paper, "gpus": gpus, "loom": None, "in_band": False,
                           "reason": "no cell where both plans fit"})
            continue
        row = max(picked, key=lambda r: r["speedup"][base])
        loom = row["speedup"][base]
        check = {"baseline": base, "paper": paper, "gpus": gpus, "at_gpus": row["gpus"], "loom": loom,
                 "in_band": abs(loom / paper - 1) <= BAND}
        if not check["in_band"]:
            check["reason"] = (explain("SuperScaler", row["systems"]["SuperScaler"]) + "; "
                               + explain(base, row["systems"][base]))
        checks.append(check)
    return checks


def print_figure(figure, rows, checks, attention, recompute_collectives):
    print(f"\n## {FIGURES[figure]['title']} (v100x8 servers, fp16, global batch {GLOBAL_BATCH}, micro-batch 1, "
          "layer-wise recompute" + (" re-issuing its collectives" if recompute_collectives else "")
          + (" (also selective; coshard also none)" if figure == "gpt3" else "")
          + (f", {attention} attention)" if attention != "fused" else ")"))
    print("| GPUs | model | " + " | ".join(f"{n}: plan / step s / TFLOPS / peak GiB" for n in SYSTEMS)
          + " | SS / Megatron | SS / DeepSpeed | winner (Loom) | paper winner |")
    print("|" + "---|" * (len(SYSTEMS) + 6))
    for row in rows:
        cells = []
        for n in SYSTEMS:
            r = row["systems"][n]
            cells.append(loom_plan.system_cell(r, r.get("plan", "")))
        ratios = [f"{s:.2f}x" if s else "n/a" for s in row["speedup"].values()]
        print(f"| {row['gpus']} | {row['model']} | " + " | ".join(cells) + " | " + " | ".join(ratios)
              + f" | {row['winner']} | {row['paper_winner']} |")
    print("\n| SuperScaler over | paper | Loom | at GPUs | within ±30 % |\n|---|---|---|---|---|")
    for c in checks:
        stated = f"{c['paper']}x" + (f" at {c['gpus']} GPUs" if c["gpus"] else " (up to)")
        loom = f"{c['loom']:.2f}x" if c["loom"] is not None else "n/a"
        print(f"| {c['baseline']} | {stated} | {loom} | {c.get('at_gpus', '-')} | {'yes' if c['in_band'] else 'no'} |")


def attention_of(figure, choice):
    """The attention form a figure is planned with: its Megatron-LM form, or the one --attention names."""
    return FIGURES[figure]["attention"] if choice == "megatron" else choice


def this_run(started):
    """When, at which commit and at which load (1-minute average, now) the figures were planned."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"date": started.isoformat(timespec="seconds"), "commit": commit,
            "load_start": STARTING_LOAD, "load_end": round(os.getloadavg()[0], 2)}


def saved_runs(saved):
    """{figure: its run} of a saved document; documents before per-figure runs had one date (and mbart_date)."""
    runs = saved.get("runs", {})
    attention = saved.get("attention", "fused")  # documents saved before the option priced fused attention
    for figure in saved["figures"]:
        if figure not in runs:
            runs[figure] = {"date": saved.get(f"{figure}_date", saved["date"]),
                            "attention": attention if isinstance(attention, str) else attention[figure]}
    return runs


def main():
    parser = loom_plan.paper_arguments(__doc__)
    parser.add_argument("--figures", default="gpt3,mbart", help="which of gpt3, mbart to plan")
    parser.add_argument("--gpus", default="4,8,16,32", help="the cells to plan, by GPU count")
    parser.add_argument("--attention", choices=["megatron", "fused", "eager", "eager-fp32"], default="megatron",
                        help="every plan's attention: megatron (each figure's Megatron-LM v3 form: GPT-3 16k "
                             "eager-fp32, mBART eager), or that form for every figure")
    parser.add_argument("--recompute-collectives", action="store_true",
                        help="every plan's recomputation re-issues its all-reduces, as Megatron-LM's full recompute does")
    parser.add_argument("--keep", metavar="FILE",
                        help="with --json: carry the figures and the rows (--gpus) this run does not plan over "
                             "from a saved document")
    args = parser.parse_args()
    recompute_collectives = args.recompute_collectives
    if args.replay:
        saved, started = loom_plan.read_saved(args.replay)
        figures, runs = saved["figures"], saved_runs(saved)
        recompute_collectives = saved.get("recompute_collectives", False)
    else:
        started, figures, runs = datetime.datetime.now(datetime.timezone.utc), {}, {}
        wanted = {int(g) for g in args.gpus.split(",")}
        for figure in args.figures.split(","):
            figures[figure] = []
            attention = attention_of(figure, args.attention)
            for gpus, model in FIGURES[figure]["cells"]:
                if gpus in wanted:
                    print(f"{figure}: {gpus} GPUs {model}, {attention} attention", file=sys.stderr, flush=True)
                    figures[figure].append(measure(args.loom, figure, gpus, model, args.timeout, attention,
                                                   recompute_collectives))
            runs[figure] = {**this_run(started), "attention": attention}
        if args.keep:
            kept, _ = loom_plan.read_saved(args.keep)
            kept_runs = saved_runs(kept)
            for figure, rows in kept["figures"].items():
                if figure not in figures:
                    figures[figure], runs[figure] = rows, kept_runs[figure]
                    continue
                # the rows of a planned figure that --gpus left out, each with the record of the run that planned it
                carried = [r for r in rows if r["gpus"] not in wanted]
                for row in carried:
                    name = f"{figure}_{row['gpus']}_gpus"
                    runs[name] = kept_runs.get(name, {**kept_runs[figure], "note": "carried over by --keep"})
                figures[figure] = sorted(figures[figure] + carried, key=lambda r: r["gpus"])
    checks = {}
    for figure, rows in figures.items():
        for row in rows:
            judge(figure, row)
        checks[figure] = paper_checks(figure, rows)
    if args.json:
        print(json.dumps({"date": started.isoformat(timespec="seconds"), "runs": runs,
                          "recompute_collectives": recompute_collectives, "figures": figures,
                          "checks": checks}, indent=2))
        return
    print(f"SuperScaler Fig. 12(b, c) in Loom's simulator, {started:%Y-%m-%d %H:%M} UTC")
    for figure, rows in figures.items():
        print_figure(figure, rows, checks[figure], runs[figure]["attention"], recompute_collectives)
    all_rows = [r for rows in figures.values() for r in rows]
    all_checks = [c for cs in checks.values() for c in cs]
    same = sum(1 for r in all_rows if r["same_winner"])
    in_band = sum(1 for c in all_checks if c["in_band"])
    print(f"\nSame winner as the paper: {same} of {len(all_rows)} rows; stated speedups within ±{BAND:.0%}: "
          f"{in_band} of {len(all_checks)} ({in_band / max(len(all_checks), 1):.0%}).")
    for figure, rows in figures.items():
        for row in rows:
            if not row["same_winner"]:
                print(f"- {figure} {row['gpus']} GPUs: winner {row['winner']}, paper {row['paper_winner']}; "
                      + "; ".join(explain(n, r) for n, r in row["systems"].items() if "error" not in r))
        for c in checks[figure]:
            if not c["in_band"]:
                print(f"- {figure}, over {c['baseline']} (paper {c['paper']}x): {c['reason']}")


if __name__ == "__main__":
    main()
