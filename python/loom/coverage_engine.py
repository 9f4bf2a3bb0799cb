"""The engine runs of loom.coverage and how their failures read: `loom plan --graph` under each plan (PLANS; the
1-device plan the parallel ones must train as, SINGLE), the first error line of a failed run, an exception's
reason, and the time limit of one class."""

import contextlib
import signal
import subprocess

PLANS = {
    "dp": ["--policy", "dp", "--gpus", "2"],
    "tp": ["--policy", "megatron", "--tp", "2", "--gpus", "2"],
}
SINGLE = ["--policy", "dp", "--dp", "1", "--gpus", "1"]  # the reference the parallel plans must train as


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    def expire(signum, frame):
        raise _Timeout(f"took longer than {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def failure_reason(error):
    import loom
    if isinstance(error, loom.UnsupportedOpsError):
        return "unsupported: " + ", ".join(error.unsupported)
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first}"[:300]


def engine_error(result):
    lines = (result.stderr + "\n" + result.stdout).strip().splitlines()
    for line in lines:
        if "error" in line.lower():
            return line.strip()[:300]
    return (lines[0].strip() if lines else f"exit status {result.returncode}")[:300]


def run_plan(loom_binary, path, options, out, timeout, emit=None):
    command = [loom_binary, "plan", "--graph", path, *options, "--out", out] + (["--emit", emit] if emit else [])
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
