"""Runs emitted plans for `loom calibrate` (docs/calibration.md): `python -m loom_profile.plan_runs RUNS --out OUT`.

RUNS is {"version": 1, "steps": N, "repeats": R, "runs": [{"name": ..., "dir": DIR}]}, each DIR a `loom plan
--emit` output. Each plan runs N steps with the runtime (loom.runtime.launch.train, gloo, one process per rank,
one torch thread each: the 1-process case too), R times: round r runs every plan once before round r + 1
starts, so a burst of load on a shared machine falls on different plans' rounds, not on all of one plan's.
OUT gets {"version": 1, "nice": the runner's niceness (the ranks inherit it), "autogroup_nice": its session's
scheduling group's while it measured (SessionPriority; null without autogroup), "runs": [{"name", "step_s":
[per round, the slowest rank's seconds of each step], "load": [per round, the 1-minute load average when it
started], "peak_bytes": [per rank, runtime/memory.py, from the first round]}]}. A progress line per plan and
round goes to stderr.
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time


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
            done[index].setdefault("peak_bytes", [rank["peak_bytes"] for rank in timing])
            later = step_s[1:] or step_s
            print(f"calibrate  ran {index + 1}/{len(runs)} {run['name']} (round {round_ + 1}/{repeats}, load "
                  f"{load:.2f}): {len(timing)} process{'es' if len(timing) > 1 else ''}, step "
                  f"{statistics.median(later) * 1e3:.1f} ms ({time.perf_counter() - began:.1f} s)", file=progress,
                  flush=True)
    return done


AUTOGROUP = pathlib.Path("/proc/self/autogroup")


def autogroup_nice():
    """The niceness of this session's scheduling group, where Linux groups by session (autogroup); else None."""
    try:
        return int(AUTOGROUP.read_text().split("nice")[1])
    except (OSError, IndexError, ValueError):
        return None


def set_autogroup_nice(value):
    """Sets this session's group niceness; False where it cannot (no autogroup, not permitted)."""
    try:
        AUTOGROUP.write_text(f"{value}\n")
        return True
    except OSError:
        return False


class SessionPriority:
    """With autogroup, the scheduler shares the cores fairly among sessions first and applies a process's niceness
    only inside its session: `nice -n -19` alone does not put the ranks ahead of another session's build or
    tests. A runner started with a negative niceness gives its session's group that niceness too while it
    measures (as root), and restores it after."""

    def __enter__(self):
        self.before = autogroup_nice()
        if self.before is not None and os.nice(0) < self.before and set_autogroup_nice(os.nice(0)):
            self.restore = self.before
        else:
            self.restore = None
        return self

    def __exit__(self, *exc):
        if self.restore is not None:
            set_autogroup_nice(self.restore)


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
    except (LaunchError, OSError, ValueError) as e:
        print(f"loom_profile.plan_runs: {e}", file=sys.stderr)
        return 1
    out = pathlib.Path(args.out)
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": 1, "nice": os.nice(0), "autogroup_nice": group, "runs": done}) + "\n")
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
