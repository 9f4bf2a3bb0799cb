"""Oases (Li et al.) Table II, the planner's per-layer TMP degrees, predicted by Loom's simulator:
`.venv/bin/python bench/papers/oases_table2.py --loom build/loom [--json] [--clusters NVLink 3090,3090]`.

Table II's throughputs without the planner are Table V's "+ fine-grained recomputation" column on the
NVLink 3090 cluster (43.9, 23.8, 8.9 K tokens/s), so the setup is Table V's (oases_table5.py): Loom's
`rtx3090-nvlinkx8`, 32 GPUs, TMP inside a layer and data parallelism over the rest, Table III's model layers
(BERT-1.3B 24 layers TMP 4 batch 128, LLaMA-7B 16 layers TMP 4 batch 32, LLaMA-65B 8 layers TMP 8 batch 8),
fp16, full recompute, `--overlap oases`. Without the planner every layer runs at the TMP degree; with it,
`--tp-layers auto` (api/oases_plan.h): per layer a divisor of the TMP group, a tp-t layer running TMP/t
data-parallel copies inside the group, priced from Loom's own 1- and 2-layer slices and solved exactly
(search/oases_planner.h). LLaMA-65B's batch of 8 over 4 data-parallel groups leaves 2 samples a group,
which 2 sub-batches x 2 copies of a tp-4 layer cannot split: a second row at batch 16 shows what the
planner does when the lower degrees can run. The script prints the degrees Loom chooses beside the paper's,
K tokens/s without and with the planner beside the paper's, the planner's wall-clock (slices, solve, and
planning the choice in full) and the solver's time beside the paper's optimization time.
"""

import json
import re
import sys

import loom_plan
from oases_table5 import COMMON, MODELS

# Per model: the paper's strategy without and with the planner, its optimization time (ms), reshard cost
# per iteration (ms), TMP cost per iteration without and with (ms), K tokens/s without and with.
PAPER = {
    "BERT-1.3B": ("[4]x24", "[2]x8+[4]x16", 451.6, 17.6, (374.8, 241.9), (43.9, 50.9)),
    "LLaMA-7B": ("[4]x16", "[2]x10+[4]x6", 380.4, 6.5, (103.1, 42.2), (23.8, 25.2)),
    "LLaMA-65B": ("[8]x8", "[4]x2+[8]x6", 157.7, 12.1, (187.5, 124.0), (8.9, 9.1)),
}
CLUSTERS = {"NVLink 3090": "rtx3090-nvlinkx8", "3090": "rtx3090x8"}
EXTRA_ROWS = [("LLaMA-65B", 16)]  # (model, global batch): a batch the lower degrees can split


def paper_spec(text):
    """'[2]x8+[4]x16' as Loom's '2x8,4x16'."""
    return ",".join(f"{d}x{n}" for d, n in re.findall(r"\[(\d+)\]x(\d+)", text))


def measure(loom, cluster, model, batch, timeout):
    name, preset, layers, tp, _ = model
    sizes = ["--model", preset, "--global-batch", str(batch), "--tp", str(tp), "--cluster", cluster]
    if layers:
        sizes += ["--layers", str(layers)]
    base = [*sizes, *COMMON, "--overlap", "oases"]
    row = {"model": name, "batch": batch, "tp": tp, "flags": " ".join(base)}
    row["without"] = loom_plan.run_plan(loom, base, timeout)
    row["with"] = loom_plan.run_plan(loom, [*base, "--tp-layers", "auto"], timeout)
    # The paper's own choice, planned as given.
    row["paper_choice"] = loom_plan.run_plan(loom, [*base, "--tp-layers", paper_spec(PAPER[name][1])], timeout)
    search = row["with"].get("search")
    if search:
        row["chosen"] = search["finalists"][0]["configuration"].removeprefix("tp layers ")
        row["predicted_s"] = search["finalists"][0]["analytic_step_seconds"]
        row["planner_s"] = search["seconds"]
        solved = re.search(r"solved exactly in ([0-9.]+) ms", search["why"])
        row["solve_ms"] = float(solved.group(1)) if solved else None
        row["why"] = search["why"]
    for key in ("without", "with", "paper_choice"):
        r = row[key]
        what = (f"refused: {r['error']}" if "error" in r else
                f"step {r['step_s']:.3f} s, {r['ktokens_s']:.1f} K tokens/s, peak {r['peak_gib']:.1f} GiB"
                + (" OOM" if r["oom"] else ""))
        print(f"  {name:<10} batch {batch:<4} {key:<13} {what} ({r['wall_s']:.1f} s)", file=sys.stderr, flush=True)
    if "why" in row:
        print(f"  {name:<10} planner: {row['why']}", file=sys.stderr, flush=True)
    return row


def cell(r):
    if "error" in r:
        return f"refused ({r['error']})"
    return f"{r['ktokens_s']:.1f}" + (" **OOM**" if r["oom"] else "")


def print_table(family, rows):
    print(f"\n### Table II, cluster {family} (Loom `{CLUSTERS[family]}`, 32 GPUs, fp16, full recompute, oases overlap)")
    print("| model layers | batch | degrees: Loom / paper | K tokens/s w/o planner: Loom / paper | w/ planner: Loom / paper "
          "| Loom's gain / paper's | paper's degrees in Loom | planner wall s (solve ms) / paper's ms |")
    print("|" + "---|" * 8)
    for row in rows:
        paper = PAPER[row["model"]]
        w, wo, pc = row["with"], row["without"], row["paper_choice"]
        gain = (f"{w['ktokens_s'] / wo['ktokens_s']:.3f}x" if "error" not in w and "error" not in wo else "-")
        chosen = row.get("chosen", f"refused ({w.get('error', '?')})")
        solve = f" ({row['solve_ms']:.2f})" if row.get("solve_ms") is not None else ""  # none when nothing was solved
        planner = f"{row['planner_s']:.1f}{solve}" if "planner_s" in row else "-"
        print(f"| {row['model']} | {row['batch']} | `{chosen}` / `{paper_spec(paper[1])}` | {cell(wo)} / {paper[5][0]} "
              f"| {cell(w)} / {paper[5][1]} | {gain} / {paper[5][1] / paper[5][0]:.3f}x | {cell(pc)} "
              f"| {planner} / {paper[2]} |")


def main():
    parser = loom_plan.paper_arguments(__doc__)
    parser.add_argument("--clusters", default="NVLink 3090", help="clusters, comma-separated (NVLink 3090, 3090)")
    args = parser.parse_args()
    tables, started = loom_plan.saved_or_fresh(args)
    for family in [] if args.replay else args.clusters.split(","):
        cluster = CLUSTERS[family]
        tables[family] = []
        for model in MODELS:
            print(f"{model[0]} on {cluster} ({family})", file=sys.stderr, flush=True)
            tables[family].append(measure(args.loom, cluster, model, model[4], args.timeout))
        for name, batch in EXTRA_ROWS:
            model = next(m for m in MODELS if m[0] == name)
            print(f"{name} batch {batch} on {cluster} ({family})", file=sys.stderr, flush=True)
            tables[family].append(measure(args.loom, cluster, model, batch, args.timeout))
    if args.json:
        print(json.dumps({"date": started.isoformat(timespec="seconds"), "tables": tables}, indent=2))
        return
    print(f"Oases Table II (planner) in Loom's simulator, {started:%Y-%m-%d %H:%M} UTC")
    for family, rows in tables.items():
        print_table(family, rows)
    for family, rows in tables.items():
        for row in rows:
            if "why" in row:
                print(f"- {family}, {row['model']} batch {row['batch']}: {row['why']}")


if __name__ == "__main__":
    main()
