"""One `loom plan --json` run for the papers' scripts: the numbers they print, also for a plan over capacity."""

import json
import subprocess
import tempfile
import time


def run_plan(loom, flags, timeout):
    """`loom plan FLAGS --json`: the plan's description, step, throughput, MFU and its most loaded device's
    peak memory and time split, or {"error": first line of stderr} where it is refused or times out."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [loom, "plan", *flags, "--out", out, "--json"]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s", "wall_s": timeout}
        wall = time.monotonic() - start
    if proc.returncode not in (0, 3) or not proc.stdout.strip():
        return {"error": proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else f"exit {proc.returncode}",
                "wall_s": wall}
    doc = json.loads(proc.stdout)
    summary = doc["summary"]
    worst = max(summary["per_device"], key=lambda d: d["peak_bytes"])
    return {
        "plan": doc["description"],
        "step_s": summary["step_time_s"],
        "tflops": summary["model_flops_per_step"] / summary["step_time_s"] / 1e12,
        "ktokens_s": summary["tokens_per_s"] / 1e3,
        "mfu": summary["mfu"],
        "peak_gib": worst["peak_bytes"] / 2**30,
        "oom": proc.returncode == 3,
        "compute_s": worst["compute_s"],
        "exposed_comm_s": worst["exposed_communication_s"],
        "idle_s": worst["idle_s"],
        "wall_s": wall,
    }
