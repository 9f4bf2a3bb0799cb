"""Measuring at a priority other sessions cannot take: the ranks of `loom calibrate` (plan_runs.py) and the op
timer of `loom profile` (__main__.py) on a shared machine.

With autogroup (`/proc/sys/kernel/sched_autogroup_enabled`), the scheduler shares the cores fairly among
sessions first and applies a process's niceness only inside its session: `nice -n -19` alone does not put a
measurement ahead of another session's build or tests. A measurer started with a negative niceness gives its
session's group that niceness too while it measures (as root), and restores it after.
"""

import os
import pathlib

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
    """While entered, this session's scheduling group runs at this process's niceness where that is the lower
    (started as `nice -n -19 ...`); restored on exit. Does nothing without autogroup or permission."""

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
