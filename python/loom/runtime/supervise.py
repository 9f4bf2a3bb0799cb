"""The launcher's watch over the rank processes (docs/codegen.md, "Launcher"): it polls their exit codes and
their heartbeats (heartbeat.py), and as soon as one rank fails, or a rank has waited in a communication longer
than the collective timeout, it names the cause and tears every rank down.

Which rank is to blame: a rank that failed outside a communication (an exception in its own work) or died by
a signal, the earliest such failure first (not the lowest-numbered); else a rank that was stopped (SIGSTOP)
or was outside any communication while the others waited for it ("rank 1 stopped at step 3, instruction 57
(...); ranks 0,2,3 waited"); else (every rank waiting, in different places: programs that do not match) the
place of each rank and the first timeout. The cause comes with the rank's traceback (its error report) or,
for a stopped rank, the line of its program it was running (faulthandler's dump on SIGUSR1).

Tear-down: SIGTERM to every rank still alive, SIGKILL to those alive after a grace period (a rank that
ignores SIGTERM, or one SIGSTOPped, which only SIGKILL ends), then every process joined, so neither the
launcher nor multiprocessing's exit handler waits for a rank."""

import json
import os
import re
import signal
import time

from . import heartbeat, programs
from .errors import LaunchError

POLL_S = 0.05
SETTLE_S = 1.0  # after the first failure is seen, how long the others have to report theirs
GRACE_S = 3.0  # SIGTERM to SIGKILL
STACK_S = 1.0  # how long a stalled rank has to dump its stack


class PortTaken(LaunchError):
    """Rank 0's store could not listen on the port picked for it: another process took it meanwhile."""


def supervise(processes, slots, directory, out_dir, timeout):
    """Returns when every rank exited 0; else raises LaunchError naming the rank to blame. Every rank is
    ended and joined on the way out, whatever happens."""
    world = len(processes)
    try:
        while True:
            codes = [p.exitcode for p in processes]
            if all(code == 0 for code in codes):
                return
            now = time.monotonic()
            progress = heartbeat.read(slots, world)
            failed = any(code not in (None, 0) for code in codes)
            stuck = any(p.waiting and codes[r] is None and now - p.since > timeout for r, p in enumerate(progress))
            if failed or stuck:
                _settle(processes)
                raise _blame(processes, slots, directory, out_dir, timeout)
            time.sleep(POLL_S)
    finally:
        tear_down(processes)


def _settle(processes):
    """Gives the failures that follow the first (peers losing their connection) a moment to land, so the first is
    chosen among all of them."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline and any(p.exitcode is None for p in processes):
        time.sleep(POLL_S)


def _blame(processes, slots, directory, out_dir, timeout):
    world = len(processes)
    now = time.monotonic()
    progress = heartbeat.read(slots, world)
    codes = [p.exitcode for p in processes]
    reports = {r: _report(out_dir, r) for r, code in enumerate(codes) if code not in (None, 0)}
    reports = {r: report for r, report in reports.items() if report is not None}

    def at(rank, line=None):
        return _where(directory, rank, progress[rank], line)

    # 1. Failures of a rank's own: outside a communication, or a death by signal (no report).
    own = []
    for rank, code in enumerate(codes):
        if code in (None, 0):
            continue
        p = progress[rank]
        if rank not in reports:
            own.append((now, rank, _death(code)))
        elif not p.waiting:
            own.append((p.failed_at or now, rank, reports[rank]))
    if own:
        _, rank, cause = min(own)
        after = sorted(r for r, code in enumerate(codes) if code not in (None, 0) and r != rank)
        then = f"\n  then {_ranks(after)} failed (waiting for it)" if after else ""
        port = PortTaken if "EADDRINUSE" in cause else LaunchError
        return port(f"rank {rank} failed: {_first_line(cause)}\n  at {at(rank, _traceback_line(cause, rank))}{then}"
                    f"{_details(cause)}")

    # 2. A rank the others waited for: stopped by a signal, or alive outside any communication.
    alive = [r for r, code in enumerate(codes) if code is None and progress[r].phase != heartbeat.DONE]
    stopped = [r for r in alive if _is_stopped(processes[r].pid)]
    working = [r for r in alive if not progress[r].waiting and r not in stopped]
    culprits = stopped or working
    waited = [r for r in range(world) if r not in culprits and (progress[r].waiting or codes[r] not in (None, 0))]
    if culprits and waited:
        lines = []
        for rank in culprits:
            if rank in stopped:
                lines.append(f"rank {rank} is stopped (SIGSTOP) at {at(rank)}")
                continue
            line = _stack_line(processes[rank].pid, out_dir, rank, directory)
            where = programs.where(directory, rank, line) if line else at(rank)
            if line and progress[rank].phase == heartbeat.STEPPING:
                where = f"step {progress[rank].step}, {where}"
            idle = now - progress[rank].since
            lines.append(f"rank {rank} stopped at {where} (no progress for {idle:.0f} s)")
        return LaunchError("; ".join(lines) + f"; {_ranks(waited)} waited (collective timeout {timeout:g} s)" +
                           "".join(f"\n  rank {r} waited at {at(r)}" for r in waited))

    # 3. Every rank waiting, each somewhere: the programs do not match (or the timeout is shorter than a step's
    # slowest wait); the first to give up, and where each rank was.
    gave_up = sorted((progress[r].failed_at or now, r) for r in reports)
    places = "".join(f"\n  rank {r} waited at {at(r)}" for r in range(world))
    if gave_up:
        rank = gave_up[0][1]
        cause = reports[rank]
        return LaunchError(f"rank {rank} failed: {_first_line(cause)} (no rank failed on its own: every rank waited "
                           f"for another, longer than the collective timeout {timeout:g} s){places}{_details(cause)}")
    return LaunchError(f"every rank waited longer than the collective timeout {timeout:g} s (a hang: see "
                       f"docs/codegen.md){places}")


def _where(directory, rank, p, line=None):
    """Where a rank is: the step and instruction of its program (`line`, else the last one it waited at), or
    the phase outside the steps."""
    line = line or p.line
    if p.phase == heartbeat.STEPPING:
        return f"step {p.step}, {programs.where(directory, rank, line)}" if line else f"step {p.step}"
    return heartbeat.PHASES[p.phase]


def _report(out_dir, rank):
    """The rank's error report: its cause and traceback (None when it wrote none)."""
    path = out_dir / f"rank_{rank}.error"
    try:
        report = json.loads(path.read_text())
        return f"{report['cause']}\n\n{report['traceback']}"
    except (OSError, ValueError, KeyError):
        return None


def _death(code):
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"killed by signal {name} (no error report: out of memory, or killed from outside?)"
    return f"exit code {code} without an error report"


def _first_line(cause):
    return cause.splitlines()[0] if cause else ""


def _details(cause):
    rest = cause.split("\n\n", 1)[1].strip() if cause and "\n\n" in cause else ""
    return "\n" + "\n".join("    " + line for line in rest.splitlines()) if rest else ""


def _ranks(ranks):
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))


def _is_stopped(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


# A frame of step() in faulthandler's dump ('File "...", line 7 in step') or a traceback ('..., line 7, in step').
_FRAME = re.compile(r'File "(?P<file>[^"]*)", line (?P<line>\d+),? in step')


def _traceback_line(cause, rank):
    """The line of rank_<rank>.py where the traceback in `cause` left the program (its innermost frame there)."""
    lines = [int(m["line"]) for m in _FRAME.finditer(cause or "") if m["file"].endswith(f"rank_{rank}.py")]
    return lines[-1] if lines else None


def _stack_line(pid, out_dir, rank, directory):
    """The line of rank_<rank>.py the rank is running now: faulthandler's dump of its stack (registered on
    SIGUSR1 by the worker), its innermost frame in the program. 0 when none came."""
    path = out_dir / f"rank_{rank}.stack"
    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        return 0
    deadline = time.monotonic() + STACK_S
    program = f"rank_{rank}.py"
    while time.monotonic() < deadline:
        try:
            for match in _FRAME.finditer(path.read_text()):
                if match["file"].endswith(program):
                    return int(match["line"])
        except OSError:
            pass
        time.sleep(POLL_S)
    return 0


def tear_down(processes):
    """SIGTERM to every rank alive, SIGKILL after GRACE_S to any still alive, then each joined."""
    for p in processes:
        if p.exitcode is None:
            p.terminate()
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(p.exitcode is None for p in processes):
        time.sleep(POLL_S)
    for p in processes:
        if p.exitcode is None:
            p.kill()
    for p in processes:
        p.join()
