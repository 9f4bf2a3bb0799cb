"""Each rank's progress, where the launcher reads it while the ranks run (docs/codegen.md, "Launcher"): a few
numbers per rank in shared memory (a multiprocessing RawArray: no file, no syscall per write) that the rank
writes as it goes and the launcher polls.

Per rank: its phase (starting, stepping, saving, finishing, done), the step, the rank program's line
being run when it last entered a blocking communication, whether it is waiting in one now and since when
(time.monotonic, one clock for every process of the machine), and when it failed. A rank that waits in a
communication longer than the collective timeout is stuck; the ranks it waits for are those not waiting."""

import sys
import time
from dataclasses import dataclass

STARTING, STEPPING, SAVING, FINISHING, DONE = range(5)
PHASES = ("its start (process groups)", "a step", "saving (results, checkpoint)", "the final barrier", "the end")
_STEP, _LINE, _WAITING, _SINCE, _PHASE, _FAILED_AT = range(6)
FIELDS = 6


def slots_for(context, world):
    """The shared array for `world` ranks, from a multiprocessing context (passed to every rank process)."""
    return context.RawArray("d", FIELDS * world)


class Heartbeat:
    """What rank `rank` writes. enter()/leave() bracket every blocking communication call (comm.Communicator);
    the line is found once per call, walking up to the rank program's step() frame."""

    __slots__ = ("slots", "base", "program")

    def __init__(self, slots, rank):
        self.slots, self.base, self.program = slots, FIELDS * rank, f"rank_{rank}.py"
        self.slots[self.base + _SINCE] = time.monotonic()

    def phase(self, phase, step=None):
        s, b = self.slots, self.base
        if step is not None:
            s[b + _STEP] = step
        s[b + _PHASE] = phase
        s[b + _SINCE] = time.monotonic()

    def enter(self):
        s, b = self.slots, self.base
        s[b + _LINE] = self._line()
        s[b + _WAITING] = 1
        s[b + _SINCE] = time.monotonic()

    def leave(self):
        s, b = self.slots, self.base
        s[b + _WAITING] = 0
        s[b + _SINCE] = time.monotonic()

    def failed(self):
        self.slots[self.base + _FAILED_AT] = time.monotonic()

    def _line(self):
        frame = sys._getframe(2)
        for _ in range(6):
            if frame is None:
                break
            if frame.f_code.co_name == "step" and frame.f_code.co_filename.endswith(self.program):
                return frame.f_lineno
            frame = frame.f_back
        return 0


@dataclass(frozen=True)
class Progress:
    """A rank's record as the launcher reads it."""

    step: int
    line: int
    waiting: bool
    since: float
    phase: int
    failed_at: float  # 0 unless it failed


def read(slots, world):
    out = []
    for rank in range(world):
        s = slots[FIELDS * rank:FIELDS * (rank + 1)]
        out.append(Progress(int(s[_STEP]), int(s[_LINE]), bool(s[_WAITING]), s[_SINCE], int(s[_PHASE]), s[_FAILED_AT]))
    return out
