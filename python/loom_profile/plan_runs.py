"""Runs emitted plans for `loom calibrate` (docs/calibration.md): `python -m loom_profile.plan_runs RUNS --out OUT`.

RUNS is {"version": 1, "steps": N, "repeats": R, "runs": [{"name": ..., "dir": DIR}]}, each DIR a `loom plan
--emit` output. Each plan runs N steps with the runtime (loom.runtime.launch.train, gloo, one process per rank,
one torch thread each: the 1-process case too), R times: round r runs every plan once before round r + 1
starts, so a burst of load on a shared machine falls on different plans' rounds, not on all of one plan's.
OUT gets {"version": 1, "nice": the runner's niceness (the ranks inherit it), "autogroup_nice": its session's
scheduling group's while it measured (priority.SessionPriority; null without autogroup), "runs": [{"name", "step_s":
[per round, the slowest rank's seconds of each step], "load": [per round, the 1-minute load average when it
started], "peak_bytes": [per rank, runtime/memory.py, from the first round], "kinds": [per round, per rank
{instruction kind: [seconds, calls]} over the steps after the first (launch._instrument): where the time went]}],
"links": measure_links's, when RUNS gives "links_world" W >= 2}. A progress line per plan and
round goes to stderr.
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

from .priority import SessionPriority, autogroup_nice


def run_plans(runs, steps, repeats=1, progress=sys.stderr):
    import torch

    from loom.runtime import launch

    torch.set_num_threads(1)  # as every rank of a multi-process run (launch._worker)
    done = [{"name": run["name"], "step_s": [], "load": []} for run in runs]
    for round_ in range(repeats):
        for index, run in enumerate(runs):
            began, load = time.perf_counter(), os.getloadavg()[0]
            launch.train(run["dir"], steps, timed=True)
            timing = launch.read_timing(pathlib.Path(run["dir"]) / "results")
            step_s = [max(rank["step_s"][s] for rank in timing) for s in range(steps)]
            done[index]["step_s"].append(step_s)
            done[index]["load"].append(load)
            done[index].setdefault("kinds", []).append([rank["kinds"] for rank in timing])
            done[index].setdefault("peak_bytes", [rank["peak_bytes"] for rank in timing])
            later = step_s[1:] or step_s
            print(f"calibrate  ran {index + 1}/{len(runs)} {run['name']} (round {round_ + 1}/{repeats}, load "
                  f"{load:.2f}): {len(timing)} process{'es' if len(timing) > 1 else ''}, step "
                  f"{statistics.median(later) * 1e3:.1f} ms ({time.perf_counter() - began:.1f} s)", file=progress,
                  flush=True)
    return done


def measure_links(world, progress=sys.stderr):
    """Each kind of communication's own α-β among `world` processes (loom_profile.cluster: gloo's all-reduce,
    all-gather, reduce-scatter and sends, each fitted to the simulator's price of that kind), at the priority
    the plans ran at: {kind: {"alpha_s", "beta_bytes_per_s", "rms_relative_error"}}; {} for world < 2."""
    if world < 2:
        return {}
    from . import cluster

    began = time.perf_counter()
    fits = cluster.fit_kinds(cluster.measure(world, repeats=5))
    links = {kind: {"alpha_s": fit.alpha_s, "beta_bytes_per_s": fit.beta_bytes_per_s,
                    "rms_relative_error": fit.rms_relative()} for kind, fit in fits.items() if fit is not None}
    print(f"calibrate  links among {world} processes ({time.perf_counter() - began:.1f} s): " + ", ".join(
        f"{kind} α {link['alpha_s'] * 1e6:.0f} us β {link['beta_bytes_per_s'] / 1e9:.2f} GB/s"
        for kind, link in links.items()), file=progress, flush=True)
    return links


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m loom_profile.plan_runs", description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="the runs file loom calibrate writes")
    parser.add_argument("--out", required=True, help="results file to write")
    args = parser.parse_args(argv)
    try:
        spec = json.loads(pathlib.Path(args.runs).read_text())
        steps, repeats, runs = int(spec["steps"]), int(spec.get("repeats", 1)), spec["runs"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"loom_profile.plan_runs: {args.runs}: {e}", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
    except ImportError:
        return 3
    from loom.runtime.errors import LaunchError
    try:
        with SessionPriority():
            group = autogroup_nice()
            done = run_plans(runs, steps, repeats)
            links = measure_links(int(spec.get("links_world", 0)))
    except (LaunchError, OSError, ValueError, RuntimeError) as e:
        print(f"loom_profile.plan_runs: {e}", file=sys.stderr)
        return 1
    out = pathlib.Path(args.out)
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": 1, "nice": os.nice(0), "autogroup_nice": group, "runs": done,
                               **({"links": links, "links_world": int(spec["links_world"])} if links else {})})
                   + "\n")
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
