"""Loom's op timer: measures operator instances with PyTorch for the engine's profile database.

The engine (`loom profile`) writes a request file naming each op instance to time (registry type, local
shapes and dtypes, attributes, forward or backward); this package builds random inputs, runs each op
through torch, times it, and writes a results file (docs/profiling.md). `python -m loom_profile.cluster`
calibrates a cluster file for local gloo processes (docs/profiling.md, "Calibrating a CPU cluster"). It holds
no planning logic.
"""

REQUEST_VERSION = 1
RESULTS_VERSION = 1
