"""When each instruction of one step ran on a rank: the evidence that an overlapped program overlaps.

A blocking instruction is a span from its call to its return. An asynchronous collective (all_reduce_start,
all_gather_start, reduce_scatter_start) is a span from its issue to the moment its work completed, taken from the work's future
(the backend's thread completes it: gloo's, or NCCL's stream on CUDA), so a span can end while the rank
computes. `overlap` reads the spans back: how much of the collectives' time had compute beside it. On CUDA the
compute spans are the host's issue of the kernels, not the kernels themselves.
"""

import time

ASYNC_STARTS = ("all_reduce_start", "all_gather_start", "reduce_scatter_start")
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all") + ASYNC_STARTS


class Timeline:
    """Spans (kind, start s, end s) of the recorded step, in seconds from the step's start; records only while
    `active` (one step: a whole run's spans would grow without bound)."""

    def __init__(self):
        self.spans, self.active, self._origin = [], False, 0.0

    def start_step(self, active):
        self.spans, self.active, self._origin = [], active, time.perf_counter()

    def span(self, kind, start, end):
        if self.active:
            self.spans.append((kind, start - self._origin, end - self._origin))

    def async_span(self, kind, start, work):
        """A collective issued at `start`: its span ends when `work` completes (now, if it already has)."""
        if not self.active:
            return
        entry = [kind, start - self._origin, None]
        self.spans.append(entry)
        origin = self._origin

        def done(_future):
            entry[2] = time.perf_counter() - origin

        work.get_future().add_done_callback(done)

    def finished(self):
        """The spans as tuples, once every async span has ended (after the step's finish)."""
        return [tuple(s) for s in self.spans if s[2] is not None]


def overlap(spans):
    """{"collective_s": total span of the collectives, "compute_beside_s": the compute inside those spans,
    "ratio": their quotient}: 0 for a program whose collectives block the compute, up to 1 where every
    collective ran entirely beside compute."""
    computes = sorted((s, e) for kind, s, e in spans if kind.startswith(("compute", "backward", "optimizer")))
    total = beside = 0.0
    for kind, start, end in spans:
        if kind not in COLLECTIVES:
            continue
        total += end - start
        beside += sum(max(0.0, min(end, ce) - max(start, cs)) for cs, ce in computes if cs < end and ce > start)
    return {"collective_s": total, "compute_beside_s": beside, "ratio": beside / total if total else 0.0}
