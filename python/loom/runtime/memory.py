"""A rank's peak memory as the memory model counts it (include/loom/cost/memory_model.h): the bytes of the
buffers the program's instructions produce, each from the instruction that returns it until its last holder
drops it (the generated program's `del`, the end of the step for what the runtime carries to the next one).

Counted: the storage of every tensor an instruction returns (load, compute, the locals, collectives, the
wait of a start, a receive's buffer), each storage once, however many views of it were returned. Not
counted, as the model does not count them: the temporaries inside an op, gloo's staging buffers, the
interpreter, torch itself, and the allocator's free blocks (so this is not the process's resident memory)."""

import weakref

import torch

# The instructions whose results are buffers of the ExecPlan (runtime.py's methods).
PRODUCERS = ("load", "compute", "slice", "scale", "combine", "accumulate", "all_reduce", "reduce_scatter",
             "all_gather", "all_to_all", "recv", "wait", "to_host", "to_device")


class LiveBytes:
    """Live and peak bytes of the storages the tracked instructions returned."""

    def __init__(self):
        self.live = 0
        self.peak = 0
        self._holders = {}  # storage address -> [tensors still holding it, bytes]
        self._seen = set()  # ids of the tensor objects tracked (one finalizer each)

    def add(self, value):
        if isinstance(value, torch.Tensor):
            self._add_tensor(value)
        elif isinstance(value, (tuple, list)):
            for v in value:
                self.add(v)
        elif isinstance(getattr(value, "buffer", None), torch.Tensor):  # a receive in flight (comm.Incoming)
            self._add_tensor(value.buffer)

    def _add_tensor(self, tensor):
        if id(tensor) in self._seen:
            return
        storage = tensor.untyped_storage()
        address, size = storage.data_ptr(), storage.nbytes()
        self._seen.add(id(tensor))
        entry = self._holders.get(address)
        if entry is None:
            entry = self._holders[address] = [0, size]
            self.live += size
            self.peak = max(self.peak, self.live)
        entry[0] += 1
        weakref.finalize(tensor, self._release, id(tensor), address)

    def _release(self, tensor_id, address):
        self._seen.discard(tensor_id)
        entry = self._holders[address]
        entry[0] -= 1
        if entry[0] == 0:
            del self._holders[address]
            self.live -= entry[1]


def track(rt):
    """Wraps rt's producing instructions (after any other wrapping) to count what they return; returns the
    LiveBytes they fill and a function that takes the wrappers off again (the counts of what they saw stay
    right: a tensor's release is its finalizer's)."""
    counted = LiveBytes()
    wrapped = {name: getattr(rt, name) for name in PRODUCERS}

    def counting(method):
        def call(*args, **kwargs):
            result = method(*args, **kwargs)
            counted.add(result)
            return result
        return call

    for name in PRODUCERS:
        setattr(rt, name, counting(wrapped[name]))

    def untrack():
        for name, method in wrapped.items():
            setattr(rt, name, method)

    return counted, untrack
