"""One `loom plan --json` for the paper scripts: the numbers of its summary, or an error string."""

import json
import subprocess
import tempfile
import time


def plan_summary(loom, model, args, timeout):
    """`loom plan --model MODEL ARGS --json`: step, effective TFLOPS, the peak-memory device's numbers (also for a
    plan over capacity, exit 3), and the planning wall time; {"error": first stderr line} when refused."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [loom, "plan", "--model", model, *args, "--out", out, "--json"]
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
        "peak_gib": worst["peak_bytes"] / 2**30,
        "oom": proc.returncode == 3,
        "exposed_comm_s": worst["exposed_communication_s"],
        "idle_s": worst["idle_s"],
        "compute_s": worst["compute_s"],
        "wall_s": wall,
    }
