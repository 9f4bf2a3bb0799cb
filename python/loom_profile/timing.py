"""Timing one callable: warm-up, then repeats of a calibrated inner loop, and the median per call.

On CUDA the op is captured in a CUDA graph, `copies` calls back to back, and the graph's replays are
timed with CUDA events: GPU time per call, without the Python, dispatch and autograd-engine overhead of
eager mode (which the cost model's ComputeConstants::launch_seconds stands for). Where capture fails (an
op that synchronizes with the host), the eager loop is timed instead. On the CPU the eager loop is timed
with time.perf_counter. A repeat runs enough calls to last `min_time` seconds, so the clock's resolution
stays small against short ops.
"""

import math
import statistics
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TimingOptions:
    warmup: int = 3        # untimed calls first (kernel selection, allocator, caches)
    repeats: int = 10      # timed repeats; the median is reported
    min_time: float = 1e-3  # seconds each repeat lasts at least (sets the inner loop count)
    max_inner: int = 1000  # calls per repeat at most


@dataclass(frozen=True)
class Timing:
    seconds: float  # median over repeats, per call
    fastest: float
    slowest: float
    calls_per_repeat: int
    method: str = "eager"  # "cuda-graph" or "eager"


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_inner(fn, calls: int, device: torch.device) -> float:
    """Seconds per call over `calls` back-to-back calls."""
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / calls
    begin = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - begin) / calls


def measure(fn, device: torch.device, options: TimingOptions) -> Timing:
    for _ in range(max(options.warmup, 1)):
        fn()
    _synchronize(device)
    once = _run_inner(fn, 1, device)
    calls = 1 if once <= 0 else int(math.ceil(options.min_time / once))
    calls = max(1, min(options.max_inner, calls))
    samples = [_run_inner(fn, calls, device) for _ in range(max(options.repeats, 1))]
    return Timing(statistics.median(samples), min(samples), max(samples), calls)


def measure_cuda_graph(fn, device: torch.device, stream, options: TimingOptions, copies: int) -> Timing:
    """Times `fn` captured `copies` times in one CUDA graph on `stream` (where any state `fn` reads, such as
    an autograd graph, was built). Raises whatever capture raises."""
    with torch.cuda.stream(stream):
        for _ in range(max(options.warmup, 1)):
            fn()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(copies):
            fn()
    try:
        replay = measure(graph.replay, device, TimingOptions(1, options.repeats, options.min_time, options.max_inner))
    finally:
        del graph
    return Timing(replay.seconds / copies, replay.fastest / copies, replay.slowest / copies,
                  replay.calls_per_repeat * copies, "cuda-graph")
