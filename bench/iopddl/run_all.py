#!/usr/bin/env python3
"""Runs `loom solve-iopddl` on the IOPDDL contest instances (../shared/benchmarks/iopddl) and prints,
per instance, the nodes, the cost found, the contest's best (the README's table), their ratio, the peak
usage against the limit, the seconds loom reports (from its start, reading included) and the process's
wall seconds, then the median ratio and the largest wall time past the timeout. `--json` prints the rows
as JSON.

    python3 bench/iopddl/run_all.py --timeout 30 [--only B,G,V] [--loom build/loom] [--json]
"""
import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT.parent / "shared" / "benchmarks" / "iopddl"


def contest_best(readme):
    """{instance: best cost} from the README's table rows '| A | nodes | edges | best | ...'."""
    best = {}
    for line in readme.read_text().splitlines():
        m = re.match(r"\|\s*([A-Z])\s*\|\s*\d+\s*\|\s*\d+\s*\|\s*(\d+)\s*\|", line)
        if m:
            best[m.group(1)] = int(m.group(2))
    return best


def solve(loom, path, timeout, seed):
    cmd = [str(loom), "solve-iopddl", str(path), "--timeout", str(timeout), "--seed", str(seed), "--json"]
    began = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout * 3 + 120)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {timeout * 3 + 120:.0f} s"}
    wall = time.monotonic() - began
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]}
    summary = json.loads(done.stdout)
    summary.pop("strategies", None)
    summary["wall_seconds"] = wall  # the process's, start and exit included
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=30, help="seconds per instance (default 30)")
    parser.add_argument("--only", default="", help="instances to run, e.g. B,G,V (default: all)")
    parser.add_argument("--loom", default=str(ROOT / "build" / "loom"), help="the loom binary")
    parser.add_argument("--benchmarks", default=str(BENCHMARKS), help="the folder of the instances")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the rows and the median as JSON")
    args = parser.parse_args()
    folder = pathlib.Path(args.benchmarks)
    best = contest_best(folder / "README.md")
    only = set(filter(None, args.only.split(",")))
    rows = []
    for path in sorted(folder.glob("asplos-2025-iopddl-*.json.gz")):
        name = path.name.split("-")[-1].split(".")[0]
        if only and name not in only:
            continue
        summary = solve(args.loom, path, args.timeout, args.seed)
        row = {"instance": name, **summary, "contest_best": best.get(name)}
        if "cost" in summary and best.get(name):
            row["ratio"] = summary["cost"] / best[name]
            row["feasible"] = summary["peak_usage"] <= summary["usage_limit"]
        rows.append(row)
        if not args.json:
            print_row(row, flush=True)
    ratios = [r["ratio"] for r in rows if "ratio" in r]
    median = statistics.median(ratios) if ratios else None
    feasible = sum(1 for r in rows if r.get("feasible"))
    if args.json:
        print(json.dumps({"timeout": args.timeout, "rows": rows, "median_ratio": median, "feasible": feasible,
                          "instances": len(rows)}, indent=2))
    else:
        print(f"median ratio {median:.3f}; {feasible} of {len(rows)} feasible" if median else "no instance solved")
        walls = [r["wall_seconds"] for r in rows if "wall_seconds" in r]
        if walls:
            print(f"largest wall time {max(walls):.2f} s ({max(walls) - args.timeout:+.2f} s past the timeout)")
    return 0 if feasible == len(rows) else 1


HEADER = False


def print_row(row, flush):
    global HEADER
    if not HEADER:
        print(f"{'inst':<5}{'nodes':>7} {'cost':>16} {'contest best':>16} {'ratio':>8} {'peak/limit':>11} {'s':>6}"
              f" {'wall':>6}")
        HEADER = True
    if "error" in row:
        print(f"{row['instance']:<5} error: {row['error']}", flush=flush)
        return
    print(f"{row['instance']:<5}{row['nodes']:>7} {row['cost']:>16} {row['contest_best']:>16} {row['ratio']:>8.3f} "
          f"{row['peak_usage'] / row['usage_limit']:>11.4f} {row['seconds']:>6.1f} {row['wall_seconds']:>6.1f}",
          flush=flush)


if __name__ == "__main__":
    sys.exit(main())
