"""The launcher's error: a program it refuses to start, or a run that failed; the message names the rank or the
file and the cause."""


class LaunchError(RuntimeError):
    """A rank failed or stopped, or the program's files do not fit together; the message names which and why."""
