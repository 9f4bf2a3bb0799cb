"""One `loom plan --json` run for the papers' scripts: the numbers they print, also for a plan over capacity."""

import argparse
import datetime
import json
import os
import subprocess
import tempfile
import threading
import time


def plan_json(loom, flags, timeout):
    """`loom plan FLAGS --json` in a scratch --out: (its JSON document or None, exit code, stderr, wall seconds,
    the process's peak RSS in GB, from os.wait4). A refusal or a timeout is (None, ...) with the reason as
    stderr's text."""
    with tempfile.TemporaryDirectory() as out, open(f"{out}/stdout", "w+") as stdout, \
            open(f"{out}/stderr", "w+") as stderr:
        start = time.monotonic()
        proc = subprocess.Popen([loom, "plan", *flags, "--out", f"{out}/files", "--json"], stdout=stdout, stderr=stderr)
        killed = threading.Event()
        timer = threading.Timer(timeout, lambda: (killed.set(), proc.kill()))
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        wall = time.monotonic() - start
        stdout.seek(0)
        stderr.seek(0)
        text, errors = stdout.read(), stderr.read()
    rss_gb = usage.ru_maxrss / 2**20  # KiB on Linux
    if killed.is_set():
        return None, None, f"timed out after {timeout} s", timeout, rss_gb
    if proc.returncode not in (0, 3) or not text.strip():
        return None, proc.returncode, errors.strip() or f"exit {proc.returncode}", wall, rss_gb
    return json.loads(text), proc.returncode, errors, wall, rss_gb


def run_plan(loom, flags, timeout):
    """`loom plan FLAGS --json`: the plan's description, step, throughput, MFU and its most loaded device's
    peak memory and time split (and a search's summary, "search", where the plan came from one), or
    {"error": first line of stderr} where it is refused or times out."""
    doc, code, stderr, wall, _ = plan_json(loom, flags, timeout)
    if doc is None:
        return {"error": stderr.splitlines()[0], "wall_s": wall}
    summary = doc["summary"]
    worst = max(summary["per_device"], key=lambda d: d["peak_bytes"])
    return {
        "plan": doc["description"],
        "step_s": summary["step_time_s"],
        "tflops": summary["model_flops_per_step"] / summary["step_time_s"] / 1e12,
        "ktokens_s": summary["tokens_per_s"] / 1e3,
        "mfu": summary["mfu"],
        "peak_gib": worst["peak_bytes"] / 2**30,
        "oom": code == 3,
        "compute_s": worst["compute_s"],
        "exposed_comm_s": worst["exposed_communication_s"],
        "idle_s": worst["idle_s"],
        "wall_s": wall,
        **({"search": doc["search"]} if "search" in doc else {}),
    }


def system_cell(result, label, digits=(2, 1)):
    """One system's table cell: "`flags`: refused (why)", or "label / step s / TFLOPS / peak GiB", marked
    **OOM** over capacity; `digits` are the step's and the TFLOPS' decimals."""
    if "error" in result:
        return f"`{result['flags']}`: refused ({result['error']})"
    step, tflops = digits
    return (f"{label} / {result['step_s']:.{step}f} / {result['tflops']:.{tflops}f} / {result['peak_gib']:.1f}"
            + (" **OOM**" if result["oom"] else ""))


def progress_text(result, digits=(2, 1)):
    """A plan's progress-line summary: "refused: why", or "step s, TFLOPS, peak GiB", OOM over capacity."""
    if "error" in result:
        return f"refused: {result['error']}"
    step, tflops = digits
    return (f"step {result['step_s']:.{step}f} s, {result['tflops']:.{tflops}f} TFLOPS, "
            f"peak {result['peak_gib']:.1f} GiB" + (" OOM" if result["oom"] else ""))


def paper_arguments(description, timeout=600):
    """The options every paper script takes (--loom, --json, --timeout, --replay); the script adds its own."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loom", default="build/loom")
    parser.add_argument("--json", action="store_true", help="print the measured rows as JSON")
    parser.add_argument("--timeout", type=int, default=timeout, help="seconds per plan")
    parser.add_argument("--replay", metavar="FILE", help="print the tables of a saved --json document, planning nothing")
    return parser


def read_saved(path):
    """A saved --json document and the time it was measured."""
    with open(path) as f:
        saved = json.load(f)
    return saved, datetime.datetime.fromisoformat(saved["date"])


def saved_or_fresh(args):
    """(tables, started): a --replay document's tables and date, or none and now."""
    if args.replay:
        saved, started = read_saved(args.replay)
        return saved["tables"], started
    return {}, datetime.datetime.now(datetime.timezone.utc)
