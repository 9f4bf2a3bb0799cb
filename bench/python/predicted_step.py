"""The step Loom's simulator predicts for a dp plan on this machine: bench_ddp.py's "predicted" line.

Three measurements feed `loom plan --cluster CPU.json --profile DB`:
1. links: `loom_profile.cluster` times gloo among the W processes and fits the simulator's α-β all-reduce
   price to it, writing a one-node cluster file of W "GPUs" named after this setup (docs/profiling.md,
   "Calibrating a CPU cluster");
2. ops: `loom profile --graph G --policy dp --gpus W` times the plan's sub-ops with the Python timer under
   that name, with one torch thread (OMP_NUM_THREADS=1), as each rank runs;
3. load: W ranks on C < W cores each compute about W/C times slower than a process alone. The ops are
   therefore timed under the ranks' load: W-1 companion processes run the same timer on the same op list
   in a loop (one thread each) while the timed one measures, so W single-thread processes share the cores
   as the ranks do. They are timed alone as well, and the step predicted from those times is printed beside,
   so the slowdown the load causes is shown, not assumed.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from loom_profile import cluster as calibration  # noqa: E402  (the package lives in python/)

# Runs the timer over the request file again and again until it is stopped: one rank's worth of load.
_COMPANION = """import sys
from loom_profile.__main__ import main
while True:
    main([sys.argv[1], "--out", sys.argv[2], "--device", "cpu", "--quiet"])
"""


def single_thread_env():
    """The environment for the timer: torch on one thread as each rank (launch.py sets 1), the package first."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "python"), env.get("PYTHONPATH")) if p)
    return env


def run_checked(command, what, env=None):
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise SystemExit(f"bench_ddp: {what}: `{' '.join(command)}` failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def device_name(world):
    """The devices' name in the cluster file and the profile's keys: a process of W, one thread each."""
    return f"cpu-1thread-of-{world}"


def calibrate_links(world, out_dir):
    """The cluster file for this machine (out_dir/cluster.json) and the calibration's report."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return calibration.calibrate(world, device_name(world), out_dir / "cluster.json")
    except (ValueError, RuntimeError) as e:
        raise SystemExit(f"bench_ddp: calibrating the links: {e}") from e


def profile_args(loom, graph, world, db):
    return [loom, "profile", "--graph", str(graph), "--policy", "dp", "--gpus", str(world), "--db", str(db),
            "--device-name", device_name(world), "--python", sys.executable]


def profile_ops(loom, graph, world, db, companions):
    """Times the plan's sub-ops into a fresh database `db`, with `companions` processes timing the same ops
    throughout (0: alone). Returns the number of keys measured."""
    db.unlink(missing_ok=True)
    env = single_thread_env()
    load = []
    if companions:
        requests = db.with_suffix(".requests.json")
        run_checked([*profile_args(loom, graph, world, db), "--dry-run", "--requests", str(requests)],
                    "listing the ops to time")
        load = [subprocess.Popen([sys.executable, "-c", _COMPANION, str(requests), str(db.with_suffix(f".load{i}.json"))],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for i in range(companions)]
        time.sleep(2)  # their torch imports, so that the timed ops overlap their timing, not their start
    try:
        out = run_checked(profile_args(loom, graph, world, db), "timing the ops", env)
    finally:
        for p in load:
            p.terminate()
        for p in load:
            p.wait()
    return int(out.split("measured", 1)[1].split()[0])


def plan_command(loom, graph, world, cluster_file, db, out, emit=None, layout_cluster=None):
    """`loom plan` on the calibrated cluster with the ops' database; `layout_cluster`: the cluster whose links
    choose the collectives (--layout-cluster), so the program planned for that machine is the one priced."""
    command = [loom, "plan", "--graph", str(graph), "--policy", "dp", "--gpus", str(world), "--cluster",
               str(cluster_file), "--profile", str(db), "--out", str(out), "--json"]
    if layout_cluster:
        command += ["--layout-cluster", str(layout_cluster)]
    return command + (["--emit", str(emit)] if emit else [])


def simulate(command):
    """`loom plan ... --json`'s document (docs/json.md)."""
    return json.loads(run_checked(command, "planning on the calibrated cluster"))


def summary(plan_doc):
    """The predicted step and device 0's split of it, seconds."""
    s = plan_doc["summary"]
    d = s["per_device"][0]
    return {"step_time_s": s["step_time_s"], "compute_s": d["compute_s"],
            "exposed_communication_s": d["exposed_communication_s"], "idle_s": d["idle_s"]}
