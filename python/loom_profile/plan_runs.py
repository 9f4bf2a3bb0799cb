"""Runs emitted plans for `loom calibrate` (docs/calibration.md): `python -m loom_profile.plan_runs RUNS --out OUT`.

RUNS is {"version": 1, "steps": N, "runs": [{"name": ..., "dir": DIR}]}, each DIR a `loom plan --emit` output.
Each plan runs N steps with the runtime (loom.runtime.launch.train, gloo, one process per rank, one torch
thread each: the 1-process case too). OUT gets {"version": 1, "runs": [{"name", "step_s": [the slowest rank's
seconds of each step], "peak_bytes": [per rank, runtime/memory.py]}]}. A progress line per plan goes to stderr.
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time


def run_plans(runs, steps, progress=sys.stderr):
    import torch

    from loom.runtime import launch

    torch.set_num_threads(1)  # as every rank of a multi-process run (launch._worker)
    done = []
    for index, run in enumerate(runs):
        began = time.perf_counter()
        launch.train(run["dir"], steps, timed=True)
        timing = launch.read_timing(pathlib.Path(run["dir"]) / "results")
        step_s = [max(rank["step_s"][s] for rank in timing) for s in range(steps)]
        done.append({"name": run["name"], "step_s": step_s, "peak_bytes": [rank["peak_bytes"] for rank in timing]})
        later = step_s[1:] or step_s
        print(f"calibrate  ran {index + 1}/{len(runs)} {run['name']}: {len(timing)} process"
              f"{'es' if len(timing) > 1 else ''}, step {statistics.median(later) * 1e3:.1f} ms "
              f"({time.perf_counter() - began:.1f} s)", file=progress, flush=True)
    return done


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m loom_profile.plan_runs", description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="the runs file loom calibrate writes")
    parser.add_argument("--out", required=True, help="results file to write")
    args = parser.parse_args(argv)
    try:
        spec = json.loads(pathlib.Path(args.runs).read_text())
        steps, runs = int(spec["steps"]), spec["runs"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"loom_profile.plan_runs: {args.runs}: {e}", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
    except ImportError:
        return 3
    from loom.runtime.errors import LaunchError
    try:
        done = run_plans(runs, steps)
    except (LaunchError, OSError, ValueError) as e:
        print(f"loom_profile.plan_runs: {e}", file=sys.stderr)
        return 1
    out = pathlib.Path(args.out)
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": 1, "runs": done}) + "\n")
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
