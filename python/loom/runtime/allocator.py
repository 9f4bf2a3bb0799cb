"""The rank processes keep the memory a step frees for the next step, as a caching allocator does.

A step allocates and frees the same tensors every step. glibc's malloc (torch's CPU allocator) serves blocks
above M_MMAP_THRESHOLD by fresh mappings and returns the top of its heap to the kernel once more than
M_TRIM_THRESHOLD is free there; both start low (128 KiB, 256 KiB) and rise only after the process frees a large
mapped block, so where they stand depends on what the process happened to free before. Where they stay low,
every page of a step's large activations is returned and faults in again (zeroed by the kernel) on the next
step: the data-parallel GPT-2 of bench/python/bench_ddp.py took 3,000-5,500 page faults a step per rank (torch
DDP's processes 100-1,800 in the same runs), about 8 % of its CPU time on 4 processes sharing 2 cores. Both thresholds set high keep the
freed blocks in the heap for reuse (the process's resident memory stays at its peak, as with torch's CUDA
caching allocator)."""

import ctypes

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# Tried in order: a glibc that caps the mmap threshold at 32 MiB (its dynamic maximum) refuses the first.
_THRESHOLDS = (1 << 30, 32 << 20)


def keep_freed_memory():
    """Sets glibc's trim and mmap thresholds high in this process; True when set, False where the C library is
    not glibc (its allocator keeps its own policy)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not mallopt(_M_TRIM_THRESHOLD, _THRESHOLDS[0]):
        return False
    return any(mallopt(_M_MMAP_THRESHOLD, value) for value in _THRESHOLDS)
