"""The object a generated rank program calls (`def step(rt)`, docs/codegen.md): one method per kind of
ExecPlan instruction, over this rank's tensors.

A recv returns the receive in flight (comm.Incoming), as exec_plan.h defines it ("the data of a recv is
ready for its readers when it arrives"): every method that reads a buffer waits for it there, the first
reader in fact (later readers find it arrived), and finish() waits any that no instruction read."""

import torch

from . import geometry
from .comm import Incoming
from .compute import SubOp, flush_adam
from .initial import DTYPES, counted_tokens, initial_value


class Runtime:
    """rank's view of one step. `comm` is None for a single-process program (world size 1).

    Values: `initial` maps tensor names to whole single-device values (a module's weights, a checkpoint's
    tensors) loaded instead of the seeded generator's; `set_batch` gives the inputs of the next step.
    `start_step` counts the optimizer steps taken before (a resumed run: Adam's bias correction and the
    generated batches continue from there).

    Several steps: `next_step()` after a step makes the persistent tensors it kept (each `X.updated`, where
    the next step loads X: the plan's step closing puts it there) the next step's loads of X, draws the next
    batch, and counts the optimizer's step (Adam's bias correction)."""

    def __init__(self, manifest, rank, comm=None, seed=1, device="cpu", initial=None, start_step=0):
        self.manifest = manifest
        self.rank = rank
        self.comm = comm
        self.seed = seed
        self.device = torch.device(device)
        self.tensors = manifest["tensors"]
        self._sub_ops = {}
        self._initial = {}
        self._given = _checked_values(manifest, dict(initial or {}), "initial value")
        self._batch = {}
        self.step_index = int(start_step)  # steps taken before this one: 0 for the first step
        self._carried = {}  # tensor name -> [(piece, value)]: this rank's results of the previous step
        self.kept = []  # (tensor name, piece, value): the step's results
        self._adam = []  # deferred Adam(W) steps (compute.flush_adam), run before any other instruction
        self._own = set()  # ids of this step's loads that are the previous step's results: the runtime's to write
        self._receiving = False  # a recv was posted this step: a compute's inputs may be receives in flight

    def next_step(self):
        """Begins the next step from this step's results; returns this step's kept triples."""
        kept, self.kept = self.kept, []
        carried = {}
        for name, piece, value in kept:
            target = self.tensors[name].get("updates")
            if target is not None:
                carried.setdefault(target, []).append((piece, value.to(self.device)))
        self._carried = carried
        self._own = set()
        self._initial = {k: v for k, v in self._initial.items() if self.tensors[k].get("role") != "input"}
        self._batch = {}
        self.step_index += 1
        return kept

    def set_batch(self, batch):
        """The whole single-device values of the next step's inputs (by input name); inputs left out are
        drawn by the generator."""
        batch = _checked_values(self.manifest, dict(batch), "batch value")
        for name in batch:
            if self.tensors[name].get("role") != "input":
                raise ValueError(f"batch value '{name}' is a {self.tensors[name].get('role')}, not an input of the "
                                 f"plan (its inputs: {sorted(k for k, e in self.tensors.items() if e.get('role') == 'input')})")
        self._batch = batch

    # --- data -------------------------------------------------------------------------------------

    def load(self, name, piece, host=False):
        """The piece of a leaf's single-device initial value: its box, times 1/count for a value part.
        `host`: a host buffer (an offloaded optimizer state or parameter, exec_plan.h), kept in CPU memory."""
        box, (index, count) = piece
        entry = self.tensors[name]
        if name in self._carried:
            value = self._carried_piece(name, piece)
            if host:
                value = value.cpu()  # itself when it is there already (a CPU device, or kept on the host)
            self._own.add(id(value))
            return value
        whole = self._whole(name, entry)
        value = geometry.restrict(whole, tuple(geometry.local_shape_box(whole.shape)), box) if box else whole.clone()
        value = value.to(DTYPES[entry["dtype"]])
        if count > 1:
            value = value / count
        return value.cpu() if host else value.to(self.device)

    def _whole(self, name, entry):
        """The whole single-device value a load restricts: the batch's, the given one, else the generator's
        (an fp32 master copy follows its parameter's given value)."""
        if name in self._batch:
            return self._batch[name]
        if entry.get("init") == "derived":  # from the whole labels of this step, whoever gave them
            if name not in self._initial:  # counted once a step (an input: next_step drops it), not per load
                derived = entry["derived"]
                labels = self._whole(derived["from"], self.tensors[derived["from"]])
                self._initial[name] = counted_tokens(labels, derived)
            return self._initial[name]
        source = entry.get("copy_of") if entry.get("init") == "copy" else name
        if source in self._given:
            return self._given[source]
        if name not in self._initial:
            self._initial[name] = initial_value(name, entry, self.seed, self.tensors, step=self.step_index)
        return self._initial[name]

    def _carried_piece(self, name, piece):
        """The previous step's value of the piece: kept as it is loaded, else restricted from a kept piece
        of the same value part that holds its box."""
        pieces = self._carried[name]
        for kept_piece, value in pieces:
            if kept_piece == piece or geometry.same_piece(kept_piece, piece):
                return value  # no copy: no instruction writes a buffer it reads (optimizer steps copy first)
        box, part = piece
        for (kept_box, kept_part), value in pieces:
            if tuple(kept_part) == tuple(part) and geometry.contains(kept_box, box):
                return geometry.restrict(value, kept_box, box).clone()
        raise RuntimeError(f"rank {self.rank}: step {self.step_index + 1} loads '{name}' piece {piece}, but the "
                           f"previous step kept only {[p for p, _ in pieces]} of it here (the plan's step closing "
                           f"must leave every updated tensor where the next step loads it)")

    def compute(self, sub_op, *inputs, donate=()):
        """Runs sub-op `sub_op` on `inputs`. `donate`: positions of an optimizer step's inputs that no later
        instruction reads (codegen's liveness); those that are the previous step's results (not the caller's
        values: the module's weights on the first step) are updated in place, the others copied first."""
        try:
            op = self._sub_ops[sub_op]
        except KeyError:
            op = self._sub_ops[sub_op] = SubOp(self.manifest["sub_ops"][str(sub_op)], self.device)
        if op.stepped:  # Adam's bias correction, dropout's mask
            op.set_step(self.step_index + 1)
        if self._receiving:  # a program without recvs pays nothing on this hot path
            inputs = tuple(map(self._arrived, inputs))
        writable = frozenset(i for i in donate if id(inputs[i]) in self._own and inputs[i].is_contiguous()) \
            if donate else _NOTHING  # most instructions donate nothing: no set built on the hot path
        if op.batchable:  # deferred: its outputs are filled before the next other instruction reads them
            outputs, entry = op.start_adam(inputs, writable)
            self._adam.append(entry)
            return outputs
        if self._adam:
            self._flush()
        return op.run(inputs, writable)

    def _flush(self):
        """Runs the deferred optimizer steps (one multi-tensor call per group: compute.flush_adam)."""
        if self._adam:
            pending, self._adam = self._adam, []
            flush_adam(pending)

    def keep(self, name, value, piece):
        """A result of the step, kept where it is (on the device: the next step loads it from there; results
        and checkpoints move what they take to the CPU, on_cpu)."""
        self._flush()
        value = self._arrived(value).detach()
        if self.comm is not None and self.comm.bucket_storages and \
                value.untyped_storage().data_ptr() in self.comm.bucket_storages:
            value = value.clone()  # a bucket's sum: its buffer is next step's bucket (comm.all_reduce_start)
        self.kept.append((name, piece, value))

    # --- local data movement ------------------------------------------------------------------------

    def to_host(self, x):
        """exec_plan.h's copy into host memory (ZeRO-Offload's gradient shard for the CPU's step): a new
        tensor, a clone on a CPU device."""
        self._flush()
        x = self._arrived(x)
        return x.clone() if x.device.type == "cpu" else x.to("cpu")

    def to_device(self, x):
        """exec_plan.h's copy from host memory (an updated or fetched 16-bit shard): asynchronous from pinned
        memory on a GPU, a clone on a CPU device."""
        self._flush()
        if self.device.type == "cpu":
            return x.clone()
        return (x if x.is_pinned() else x.pin_memory()).to(self.device, non_blocking=True)

    def slice(self, x, in_piece, out_piece):
        self._flush()
        return geometry.slice_piece(self._arrived(x), in_piece, out_piece)

    def scale(self, x, in_piece, out_piece):
        self._flush()
        return geometry.scale_piece(self._arrived(x), in_piece, out_piece)

    def combine(self, inputs, out_piece):
        self._flush()
        return geometry.combine([(self._arrived(x), piece) for x, piece in inputs], out_piece)

    def accumulate(self, inputs, out_piece):
        """exec_plan.h's accumulate: one step of a running sum, the inputs (all of the output's box) summed as is."""
        self._flush()
        return geometry.sum_pieces([(self._arrived(x), piece) for x, piece in inputs], out_piece[0])

    # --- communication --------------------------------------------------------------------------------

    def _comm(self, what):
        self._flush()  # every communication instruction passes here
        if self.comm is None:
            raise RuntimeError(f"rank {self.rank}: {what} in a single-process run (world size 1)")
        return self.comm

    def all_reduce(self, x, group, tag, ins, outs):
        return self._comm("all-reduce").all_reduce(self._arrived(x), list(group), tag, ins, outs)

    def reduce_scatter(self, x, group, tag, ins, outs):
        return self._comm("reduce-scatter").reduce_scatter(self._arrived(x), list(group), tag, ins, outs)

    def all_gather(self, x, group, tag, ins, outs):
        return self._comm("all-gather").all_gather(self._arrived(x), list(group), tag, ins, outs)

    def all_to_all(self, x, group, tag, ins, outs):
        return self._comm("all-to-all").all_to_all(self._arrived(x), list(group), tag, ins, outs)

    def send(self, x, peer, tag):
        self._comm("send").send(self._arrived(x), peer, tag)

    def recv(self, peer, tag, piece, dtype):
        """The receive, posted now and returned in flight: the rank goes on to the next instruction."""
        incoming = self._comm("recv").recv(peer, tag, geometry.local_shape(piece[0]), DTYPES[dtype])
        self._receiving = True
        return incoming

    def all_reduce_start(self, xs, group, bucket=0, reuse=True):
        """A gradient bucket (docs/codegen.md), or with reuse=False an activation's partial sums (Oases'
        overlap, docs/overlap.md): the sums of xs over group, issued now, read by wait()."""
        return self._comm("gradient bucket").all_reduce_start([self._arrived(x) for x in xs], list(group), bucket,
                                                               reuse)

    def all_gather_start(self, xs, group, tag, ins, outs):
        """Prefetched parameters (docs/codegen.md): each of xs gathered over group, issued now, read by wait()."""
        return self._comm("parameter prefetch").all_gather_start(xs, list(group), tag, ins, outs)

    def reduce_scatter_start(self, xs, group, tag, ins, outs):
        """One link of a hierarchical sum (Oases' overlap, docs/overlap.md): this member's box of each sum of xs
        over group, issued now, read by wait()."""
        return self._comm("reduce-scatter start").reduce_scatter_start([self._arrived(x) for x in xs], list(group), tag,
                                                                       ins, outs)

    def chained(self, handle, k):
        """Output k of a started collective, read by the chained start issued next (exec_plan.h)."""
        return self._comm("chained start").chained(handle, k)

    def wait(self, handle):
        return self._comm("wait").wait(handle)

    def _arrived(self, x):
        """x itself, or the tensor of a receive in flight once its data is there (comm.arrived: gloo waits
        here; NCCL makes the current stream wait, so the reader's kernels follow the data)."""
        return self.comm.arrived(x) if type(x) is Incoming else x

    def finish(self):
        """The step's end: the deferred optimizer steps, the sends and the receives still in flight."""
        self._flush()
        if self.comm is not None:
            self.comm.finish()
        self._receiving = False


_NOTHING = frozenset()


def on_cpu(kept):
    """Kept (name, piece, value) triples with the values on the CPU (for results, checkpoints, gathers)."""
    return [(name, piece, value.cpu()) for name, piece, value in kept]


def _checked_values(manifest, values, what):
    """values with every name a tensor of the manifest and every shape its shape (float64 / int64 on the
    CPU, as the generator gives them); errors name the tensor and the expected shape."""
    tensors = manifest["tensors"]
    checked = {}
    for name, value in values.items():
        entry = tensors.get(name)
        if entry is None:
            raise ValueError(f"{what} '{name}' names no tensor of the plan ({manifest.get('description', '')})")
        value = torch.as_tensor(value).detach().cpu()
        if tuple(value.shape) != tuple(entry["shape"]):
            raise ValueError(f"{what} '{name}' has shape {tuple(value.shape)}; the plan's tensor is {tuple(entry['shape'])}")
        checked[name] = value.to(torch.float64) if value.is_floating_point() else value.to(torch.int64)
    return checked
