"""`--policy auto` against the tuned baselines on the papers' presets (issue 15, acceptance line 3).

Every preset of nnScaler Table 9, SuperScaler Table 2, Rhino Tables 1-4 and Oases Table III at the papers'
GPU counts and testbeds (../shared/REFERENCE.md; the clusters and precisions bench/papers/ uses), planned with
`loom plan --policy auto`, `megatron-best` and `deepspeed-best`. Per case: each search's predicted step,
auto's ratio to the best baseline (<= 1: auto no slower), auto's search wall time and peak RSS (os.wait4).
A summary line counts the cases where auto <= min(baselines) and gives the median search time. Where issue 14
built a hand-written new plan for the preset (new_plans.py: coshard, interlaced, 3F1B, the Oases schedule), its
fastest fitting candidate is planned too and auto's ratio to it printed; where auto is more than 2 % slower, the
table's notes name what of that plan auto's space lacks.

    .venv/bin/python bench/search/auto_vs_baselines.py --loom build/loom [--only nnscaler,rhino] [--json]
    .venv/bin/python bench/search/auto_vs_baselines.py --replay results.json[,more.json]
    (--systems new-plan measures only the new plans; --replay merges documents case by case)

Searches that fail or time out are printed as such (and count as not met). Run it with nice on a shared
box: a full sweep plans ~60 cases x 3 searches.
"""

import argparse
import datetime
import json
import os
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "papers"))
import loom_plan  # noqa: E402 (bench/papers/loom_plan.py: the one `loom plan --json` runner)
import new_plans  # noqa: E402 (beside this script)

# (table, model flags, cluster flags, GPUs, extra flags)
F16 = ["--dtype", "f16"]


def nnscaler_table9():
    # DGX-2 (16 V100 per node), fp16, global batch 32 (bench/papers/nnscaler_fig7_swin.py's setup).
    cluster = {4: ["--cluster", "dgx2", "--gpus", "4"], 8: ["--cluster", "dgx2", "--gpus", "8"],
               16: ["--cluster", "dgx2"], 32: ["--cluster", "dgx2x2"]}
    models = {4: ["swin-1.8b", "t5-3.9b", "alphafold2-87m"], 8: ["swin-5b", "t5-11b", "alphafold2-930m"],
              16: ["swin-10b", "t5-21b", "alphafold2-2.4b"], 32: ["swin-27b", "t5-47b", "alphafold2-3.2b"]}
    return [("nnScaler T9", ["--model", m], cluster[g], g, [*F16, "--global-batch", "32"])
            for g in (4, 8, 16, 32) for m in models[g]]


def superscaler_table2():
    # SuperScaler's servers (8 V100 over NVLink, 100 Gb/s IB): v100x8 (bench/papers/superscaler_fig12.py), fp16, batch 32.
    cluster = {4: ["--cluster", "v100x8", "--gpus", "4"], 8: ["--cluster", "v100x8"], 16: ["--cluster", "v100x8x2"],
               32: ["--cluster", "v100x8x4"]}
    models = {4: ["swin-1.8b", "gpt3-1.3b-16k", "mbart-4.7b", "alphafold2-87m"],
              8: ["swin-ss-6.6b", "gpt3-2.6b-16k", "mbart-9.5b", "alphafold2-930m"],
              16: ["swin-ss-13b", "gpt3-6.7b-16k", "mbart-20b", "alphafold2-2.4b"],
              32: ["swin-ss-30b", "gpt3-15b-16k", "mbart-32b", "alphafold2-3.2b"]}
    return [("SuperScaler T2", ["--model", m], cluster[g], g, [*F16, "--global-batch", "32"])
            for g in (4, 8, 16, 32) for m in models[g]]


def rhino_tables():
    # Platform M8 (8 V100-SXM2 per node, RoCE); Rhino ran fp32. Tables 1-2 at their GPU counts (global batch:
    # the preset's); Table 3 at 8 GPUs (its largest, batch per device as stated); Table 4 at its GPU counts, batch 4.
    def m8(g):
        return ["--cluster", "m8", "--gpus", str(g)] if g <= 8 else ["--cluster", f"m8x{g // 8}"]
    f32 = ["--dtype", "f32"]
    cases = []
    for g, gpt, moe in ((1, "gpt-medium", "moe-380m"), (2, "gpt-large", "moe-760m"), (4, "gpt-xl", "moe-1.3b"),
                        (8, "gpt-2.7b", "moe-2.4b"), (16, "gpt-6.7b", "moe-10b")):
        cases.append(("Rhino T1", ["--model", gpt], m8(g), g, f32))
        cases.append(("Rhino T2", ["--model", moe], m8(g), g, f32))
    for model, per_device in (("vgg19-4.2b", 128), ("dnabert", 32), ("unet-33m", 16)):
        cases.append(("Rhino T3", ["--model", model], m8(8), 8, [*f32, "--global-batch", str(8 * per_device)]))
    for g, model in ((1, "wrn-1.3b"), (2, "wrn-2.6b"), (4, "wrn-6b"), (8, "wrn-12b")):
        cases.append(("Rhino T4", ["--model", model], m8(g), g, [*f32, "--global-batch", "4"]))
    return cases


def oases_table3():
    # The 3090 cluster of bench/papers/oases_table5.py (rtx3090x8), fp16, Table III's global batch and layers.
    cluster = ["--cluster", "rtx3090x8"]
    arch = [("--model bert-large", 256), ("--model bert-1.3b", 128),
            ("--arch gpt --layers 24 --hidden 3072 --heads 24", 32), ("--model llama-7b --layers 16", 32),
            ("--arch gpt --layers 16 --hidden 6144 --heads 64", 8), ("--model llama-65b --layers 8", 8),
            ("--arch gpt --layers 4 --hidden 12288 --heads 96", 8)]
    return [("Oases T3", flags.split(), cluster, 32, [*F16, "--global-batch", str(batch)]) for flags, batch in arch]


TABLES = {"nnscaler": nnscaler_table9, "superscaler": superscaler_table2, "rhino": rhino_tables, "oases": oases_table3}
POLICIES = ("auto", "megatron-best", "deepspeed-best")
SYSTEMS = (*POLICIES, "new-plan")
WITHIN = 0.02  # "within 2 % of the hand-written new plans"


def plan(loom, flags, timeout):
    """One search: {"step_s", "fits", "plan", "search_s", "wall_s", "rss_gb"} or {"error"}."""
    doc, code, stderr, wall, rss_gb = loom_plan.plan_json(loom, flags, timeout)
    if doc is None:
        lines = [l for l in stderr.splitlines() if "error" in l] or stderr.splitlines()
        return {"error": lines[0].strip(), "wall_s": wall, "rss_gb": rss_gb}
    return {"step_s": doc["summary"]["step_time_s"], "fits": code == 0, "plan": doc["description"],
            "search_s": doc.get("search", {}).get("seconds"), "wall_s": wall, "rss_gb": rss_gb}


def new_plan(loom, base, table, model, gpus, timeout):
    """The preset's hand-written new plan (new_plans.py): its fastest fitting candidate, with its flags and
    the candidates tried; None where issue 14 built none."""
    results = []
    for flags in new_plans.candidates(table, model, gpus):
        print(f"  new plan: {' '.join(flags)}", file=sys.stderr, flush=True)
        results.append({**plan(loom, [*base, *flags], timeout), "flags": " ".join(flags)})
    chosen = new_plans.best(results)
    return None if chosen is None else {**chosen, "tried": len(results)}


def judge(case):
    """Auto's ratio to the best fitting baseline, and whether auto is no slower (None: not comparable)."""
    a = case.get("auto", {})
    baselines = [case[p] for p in POLICIES[1:] if "step_s" in case.get(p, {}) and case[p]["fits"]]
    if not baselines:
        return None, ("step_s" in a) or None  # no baseline fits: auto met if it produced a plan
    best = min(b["step_s"] for b in baselines)
    if "step_s" not in a or not a["fits"]:
        return None, False
    return a["step_s"] / best, a["step_s"] <= best * (1 + 1e-9)


def against_new_plan(case):
    """Auto's ratio to the new plan's step (both fitting), or None."""
    a, n = case.get("auto", {}), case.get("new-plan")
    if not n or "step_s" not in n or not n["fits"] or "step_s" not in a or not a["fits"]:
        return None
    return a["step_s"] / n["step_s"]


def step_text(r):
    if r is None:
        return "-"
    if "step_s" not in r and "error" not in r:
        return "not run"
    if "error" in r:
        return "error: " + r["error"][:60]
    return f"{r['step_s']:.4f}" + ("" if r["fits"] else " OOM")


def print_table(doc):
    print(f"auto vs megatron-best / deepspeed-best and the new plans ({doc['when']}, {doc['cores']} cores, load at "
          f"start {doc['load_start']}, at end {doc['load_end']})")
    print("| table | model | GPUs | cluster | auto step s | megatron-best s | deepspeed-best s | auto / best | met "
          "| auto search s (wall) | auto RSS GB | new plan s | auto / new plan |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    notes = []
    for c in doc["cases"]:
        ratio, met = judge(c)
        a = c.get("auto", {})
        wall = (f"{a['search_s']:.1f} ({a['wall_s']:.1f})" if a.get("search_s") is not None
                else f"- ({a['wall_s']:.1f})" if "wall_s" in a else "-")
        rss = f"{a['rss_gb']:.2f}" if a.get("rss_gb") else "-"
        n = c.get("new-plan")
        vs_new = against_new_plan(c)
        print(f"| {c['table']} | {c['model']} | {c['gpus']} | {c['cluster']} | {step_text(a)} | "
              f"{step_text(c.get('megatron-best', {}))} | {step_text(c.get('deepspeed-best', {}))} | "
              f"{'-' if ratio is None else f'{ratio:.4f}'} | {'yes' if met else 'no'} | {wall} | {rss} | "
              f"{step_text(n) if n else '-'} | {'-' if vs_new is None else f'{vs_new:.4f}'} |")
        if n and "flags" in n:
            kind = new_plans.kind_of(n)
            slower = vs_new is not None and vs_new > 1 + WITHIN
            notes.append(f"- {c['model']} on {c['gpus']}: new plan `{n['flags']}` ({kind}, best of {n['tried']})"
                         + (f"; auto {100 * (vs_new - 1):.1f} % slower: its space lacks {new_plans.LACKS[kind]}"
                            if slower else ""))
    judged = [judge(c)[1] for c in doc["cases"] if "auto" in c]
    times = [c["auto"]["search_s"] for c in doc["cases"] if c.get("auto", {}).get("search_s") is not None]
    compared = [against_new_plan(c) for c in doc["cases"]]
    compared = [r for r in compared if r is not None]
    print(f"\nsummary: auto <= min(baselines) in {sum(1 for m in judged if m)} of {len(judged)} cases; "
          f"median auto search {statistics.median(times) if times else float('nan'):.1f} s "
          f"(max {max(times) if times else float('nan'):.1f} s); auto within {100 * WITHIN:.0f} % of the new plan "
          f"(or faster) in {sum(1 for r in compared if r <= 1 + WITHIN)} of {len(compared)} cases with one that fits")
    if notes:
        print("\nnew plans:")
        print("\n".join(notes))


def merge(docs):
    """One document of several, cases with the same (table, model, GPUs, cluster) merged system by system."""
    doc = {**docs[0], "cases": []}
    index = {}
    for d in docs:
        for c in d["cases"]:
            key = (c["table"], c["model"], c["gpus"], c["cluster"])
            if key in index:
                index[key].update({k: v for k, v in c.items() if k in SYSTEMS})
            else:
                index[key] = dict(c)
                doc["cases"].append(index[key])
        doc["load_end"] = d["load_end"]
    return doc


def save(path, doc):
    """Writes `doc` to `path` whole (a temporary file renamed over it)."""
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loom", default="build/loom")
    parser.add_argument("--only", default=",".join(TABLES), help="tables to run: " + ",".join(TABLES))
    parser.add_argument("--gpus", default="", help="only cases at these GPU counts (comma-separated)")
    parser.add_argument("--models", default="", help="only cases whose model flags contain one of these (comma-separated)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per search (and per new-plan candidate)")
    parser.add_argument("--budget", type=float, default=0,
                        help="each search's --budget in seconds (0: none); a search ends within it but for its first "
                             "plan (api/auto_search.h)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="what to plan: " + ",".join(SYSTEMS))
    parser.add_argument("--json", action="store_true", help="print the measured document as JSON")
    parser.add_argument("--save", help="also write the document (JSON) to this file after every case, so a sweep "
                                       "stopped early keeps what it measured")
    parser.add_argument("--replay", help="reprint the table of a saved --json document (several: comma-separated)")
    args = parser.parse_args()
    if args.replay:
        print_table(merge([json.load(open(p)) for p in args.replay.split(",")]))
        return
    load = lambda: open("/proc/loadavg").read().split()[0]
    doc = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cores": os.cpu_count(),
           "load_start": load(), "cases": []}
    gpus = {int(g) for g in args.gpus.split(",") if g}
    for table in args.only.split(","):
        for name, model, cluster, g, extra in TABLES[table]():
            if gpus and g not in gpus:
                continue
            if args.models and not any(m in " ".join(model) for m in args.models.split(",")):
                continue
            case = {"table": name, "model": " ".join(model), "gpus": g, "cluster": " ".join(cluster)}
            budget = ["--budget", str(args.budget)] if args.budget > 0 else []
            for system in args.systems.split(","):
                print(f"{name}: {case['model']} on {g} GPUs, {system}", file=sys.stderr, flush=True)
                if system == "new-plan":
                    case[system] = new_plan(args.loom, [*model, *cluster, *extra], name, model, g, args.timeout)
                else:
                    case[system] = plan(args.loom, [*model, *cluster, *extra, "--policy", system, *budget],
                                        args.timeout)
            doc["cases"].append(case)
            if args.save:
                save(args.save, {**doc, "load_end": load()})
    doc["load_end"] = load()
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        print_table(doc)


if __name__ == "__main__":
    main()
