"""Collectives and point-to-point transfers of a generated program over torch.distributed.

Each call names every member's input and output piece (the generated code writes them out), so a member
can place the others' data without asking. One process group per distinct group of ranks, created by
every rank in the manifest's order at start (torch.distributed needs all ranks to create each group).
Point to point as exec_plan.h defines it: a send is an isend (waited at the step's end), a recv an irecv
returned in flight (Incoming), waited by its first reader (Runtime) or at the step's end. gloo moves point to
point data from host memory only, so with tensors on a GPU (gloo on cuda: how ranks share one GPU) a send copies
its tensor to the host first and a receive lands on the host and is copied to the GPU when waited
(p2p_through_host); gloo's collectives stage CUDA tensors themselves.
Which path a collective takes is decided once, from the backend (native_collectives), never from an
exception: a collective that raises (a timeout, a lost peer) is an error and propagates, so every rank keeps
issuing the same collectives in the same order. Every process group has the launcher's timeout (--timeout),
and each blocking call is bracketed for the launcher's watchdog (heartbeat.py).
The same code runs NCCL with tensors on cuda. Inputs may be strided views (a transpose's output: compute.py);
what goes on the wire is made dense here, at the communication boundary.
"""

import functools

import torch
import torch.distributed as dist

from . import geometry


# torch 2.13 renames reduce_scatter_tensor (deprecated there) to reduce_scatter_single; 2.11 has only the former.
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

REDUCE_SCATTER_TENSOR = "reduce_scatter_tensor"  # an even split's sum, each member keeping its chunk
ALL_TO_ALL_SINGLE = "all_to_all_single"  # one flat exchange with a split size per member (sizes may differ)


def native_collectives(backend, torch_version=torch.__version__):
    """The collectives `backend` runs natively (the others go through their fallback: reduce-scatter as an
    all-reduce and a slice, all-to-all as an all-gather and a placement). NCCL has both. gloo has
    reduce_scatter_tensor from torch 2.2 (ProcessGroupGloo::_reduce_scatter_base) and alltoall_base, which takes
    split sizes, so members' pieces may differ (its list form, dist.all_to_all, needs equal chunks). Other
    backends (mpi, ucc, a plugin): none assumed."""
    major, minor = (int(part) for part in torch_version.split("+")[0].split(".")[:2])
    if backend == "nccl":
        return frozenset({REDUCE_SCATTER_TENSOR, ALL_TO_ALL_SINGLE})
    if backend == "gloo":
        return frozenset({ALL_TO_ALL_SINGLE} | ({REDUCE_SCATTER_TENSOR} if (major, minor) >= (2, 2) else set()))
    return frozenset()


def p2p_through_host(backend, device):
    """Whether point to point goes through host memory: gloo's send and recv write and read the tensor's own
    pointer (a CUDA tensor's fails in its TCP pair, "writev ... Bad address": torch 2.11 on an H200), while NCCL
    and every backend on cpu take the tensor as it is."""
    return backend == "gloo" and torch.device(device).type != "cpu"


def _blocking(method):
    """Brackets a call that may wait for other ranks for the launcher's watchdog (Communicator.heartbeat)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        beat = self.heartbeat
        if beat is None:
            return method(self, *args, **kwargs)
        beat.enter()
        result = method(self, *args, **kwargs)
        beat.leave()
        return result
    return call


class Communicator:
    """`timeout` (a datetime.timedelta): every process group's, so a collective waits at most that long (None:
    torch's default, 30 minutes on gloo, whatever the world group has). `heartbeat`: the launcher's progress
    record (heartbeat.Heartbeat), or None."""

    def __init__(self, rank, world_size, groups, device, timeout=None, heartbeat=None):
        self.rank, self.world_size, self.device = rank, world_size, device
        self.heartbeat = heartbeat
        self.native = native_collectives(dist.get_backend())
        self.host_p2p = p2p_through_host(dist.get_backend(), device)
        self.groups = {}
        for ranks in groups:  # the same order on every rank
            key = tuple(sorted(ranks))
            if key not in self.groups:
                self.groups[key] = dist.new_group(list(key), timeout=timeout)
        self.pending = []  # sends in flight, waited at the step's end
        self.incoming = set()  # receives in flight that no reader waited for yet (finish waits them)
        # Gradient buckets' flat buffers, kept across steps as DDP keeps its own: bucket key -> buffers, the
        # k-th start of a key in a step filling the k-th. A buffer's sums are read until the step's end.
        self._bucket_buffers = {}
        self._bucket_starts = {}  # bucket key -> starts this step (finish resets)
        self._buckets_in_flight = []  # issued buckets, waited at the step's end if no reader waited
        self.bucket_storages = set()  # the flat buffers' data pointers (Runtime.keep copies what aliases one)

    def _group(self, ranks):
        try:
            return self.groups[tuple(sorted(ranks))]
        except KeyError:
            raise RuntimeError(f"rank {self.rank}: group {tuple(ranks)} is not in the manifest's groups") from None

    # --- asynchronous collectives (docs/codegen.md, "Gradient buckets", "Parameter prefetch") -------------

    def all_reduce_start(self, xs, group, bucket=None, reuse=True):
        """Sums each tensor of xs over group as one flat all-reduce (DDP's bucket: the tensors concatenated in
        order, the sum of the members' flat buffers), issued asynchronously; wait() returns the sums, views
        of the flat buffer. The buffer is the same every step (for the same bucket, group and tensors), so a
        step neither allocates nor faults it in again; its sums are valid until the step's end (finish).
        reuse=False (an activation's partial sums, Oases' overlap: many a step, each read once and freed):
        a fresh buffer, dropped with its sums, as a blocking all-reduce's output is."""
        if not reuse:
            flat = torch.cat([x.reshape(-1) for x in xs])  # a copy: the inputs stay as they are
            sums, start = [], 0
            for x in xs:
                sums.append(flat[start:start + x.numel()].view(x.shape))
                start += x.numel()
            # Not kept for finish(): its wait comes before its first reader (exec/passes.h), and keeping the
            # handle would keep every activation's sums alive until the step's end.
            return _Bucket(dist.all_reduce(flat, group=self._group(group), async_op=True), tuple(sums))
        key = (bucket, tuple(group), tuple(x.shape for x in xs), tuple(x.dtype for x in xs), xs[0].device)
        started = self._bucket_starts.get(key, 0)
        self._bucket_starts[key] = started + 1
        buffers = self._bucket_buffers.setdefault(key, [])
        flats = [x.reshape(-1) for x in xs]
        if started < len(buffers):
            flat, sums = buffers[started]
            torch.cat(flats, out=flat)
        else:
            flat = torch.cat(flats)  # the first step: the buffer (dtype promoted as cat promotes)
            sums, start = [], 0
            for x in xs:
                sums.append(flat[start:start + x.numel()].view(x.shape))
                start += x.numel()
            sums = tuple(sums)
            buffers.append((flat, sums))
            self.bucket_storages.add(flat.untyped_storage().data_ptr())
        handle = _Bucket(dist.all_reduce(flat, group=self._group(group), async_op=True), sums)
        self._buckets_in_flight.append(handle)
        return handle

    def all_gather_start(self, xs, group, tag, ins, outs):
        """Gathers each tensor of xs over group as one flat all-gather (DeepSpeed's prefetch: every member's
        pieces concatenated in order, padded to the longest member's), issued asynchronously; ins[i] and
        outs[i] name every member's piece of tensor i, and wait() returns each output placed from them."""
        me = list(group).index(self.rank)
        order = sorted(range(len(group)), key=lambda k: group[k])  # rank order, as all_gather lists them
        pieces = [[tensor_ins[k] for tensor_ins in ins] for k in order]
        sizes = [[int(torch.Size(geometry.local_shape(box)).numel()) for box, _ in member] for member in pieces]
        flat = torch.zeros(max(1, max(sum(s) for s in sizes)), dtype=xs[0].dtype, device=xs[0].device)
        mine = torch.cat([x.reshape(-1) for x in xs])
        flat[:mine.numel()] = mine
        gathered = [torch.empty_like(flat) for _ in group]
        work = dist.all_gather(gathered, flat, group=self._group(group), async_op=True)
        return _Gathered(work, gathered, pieces, sizes, [tensor_outs[me][0] for tensor_outs in outs], tag)

    def reduce_scatter_start(self, xs, group, tag, ins, outs):
        """Sums each tensor of xs over group and keeps this member's box of each sum, issued asynchronously (one
        link of a hierarchical sum, Oases' overlap: docs/overlap.md); ins[i] and outs[i] name every member's piece
        of tensor i (all inputs of one box), and wait() returns this member's outputs. One tensor split evenly
        along a dim on a backend that has it: reduce_scatter_tensor; else (as the blocking reduce_scatter's
        fallback) one flat all-reduce of them all, each output restricted from its sum."""
        me = list(group).index(self.rank)
        if len(xs) == 1 and REDUCE_SCATTER_TENSOR in self.native:
            ranked, tensor_ins, tensor_outs = _rank_order(list(group), ins[0], outs[0])
            dim = _even_split_dim(tensor_ins, tensor_outs)
            if dim is not None:
                moved = xs[0].movedim(dim, 0).contiguous()
                out = torch.empty((moved.shape[0] // len(group), *moved.shape[1:]), dtype=xs[0].dtype, device=xs[0].device)
                work = _REDUCE_SCATTER(out, moved, group=self._group(ranked), async_op=True)
                return _Scattered(work, [out], dim)
        flat = torch.cat([x.reshape(-1) for x in xs])  # a copy: the inputs stay as they are
        sums, start = [], 0
        for x in xs:
            sums.append(flat[start:start + x.numel()].view(x.shape))
            start += x.numel()
        work = dist.all_reduce(flat, group=self._group(group), async_op=True)
        return _Scattered(work, sums, None, [(i[me][0], o[me][0]) for i, o in zip(ins, outs)])

    @_blocking
    def wait(self, handle):
        """The start's outputs, handed over (the handle's take()): the program keeps its handle variable to its
        end (codegen `del`s buffers, not handles), so the handle must not keep them alive past the program's
        `del`s, or a rank holds every prefetched parameter at once (test_runtime_memory's ZeRO-3 peak)."""
        handle.work.wait()
        return handle.take()

    @_blocking
    def chained(self, handle, k):
        """Output k of a start, for a chained start that reads it (exec_plan.h: the next link of a hierarchical
        sum): its work waited first, so the next start is issued after it completes (gloo: this thread waits;
        NCCL: the current stream waits, the host goes on). Its own wait() later returns the same output."""
        handle.work.wait()
        return handle.result()[k]

    # --- gathering every member's input -----------------------------------------------------------

    def _all_inputs(self, x, group, ins):
        """Every member's input tensor, in rank order (padded flat all_gather when shapes differ)."""
        pg = self._group(group)
        x = x.contiguous()  # gloo sends and receives dense buffers (an input may be a view: compute.py)
        shapes = [geometry.local_shape(box) for box, _ in ins]
        if all(s == shapes[0] for s in shapes):
            out = [torch.empty_like(x) for _ in group]
            dist.all_gather(out, x, group=pg)
            return out
        width = max(max(1, int(torch.Size(s).numel())) for s in shapes)
        flat = torch.zeros(width, dtype=x.dtype, device=x.device)
        flat[:x.numel()] = x.reshape(-1)
        out = [torch.empty_like(flat) for _ in group]
        dist.all_gather(out, flat, group=pg)
        return [o[:torch.Size(s).numel()].reshape(s) for o, s in zip(out, shapes)]

    # --- sum kinds --------------------------------------------------------------------------------

    @_blocking
    def all_reduce(self, x, group, tag, ins, outs):
        group, ins, outs = _rank_order(group, ins, outs)
        me = group.index(self.rank)
        boxes = {tuple(map(tuple, box)) for box, _ in ins}
        if len(boxes) == 1:
            total = x.clone(memory_format=torch.contiguous_format)  # x may be a view (compute.py)
            dist.all_reduce(total, group=self._group(group))
            return geometry.restrict(total, ins[me][0], outs[me][0])
        inputs = self._all_inputs(x, group, ins)
        return geometry.sum_pieces(list(zip(inputs, ins)), outs[me][0])

    @_blocking
    def reduce_scatter(self, x, group, tag, ins, outs):
        group, ins, outs = _rank_order(group, ins, outs)
        dim = _even_split_dim(ins, outs) if REDUCE_SCATTER_TENSOR in self.native else None
        if dim is None:  # an uneven split, or a backend without it: the sum everywhere, each keeping its box
            return self.all_reduce.__wrapped__(self, x, group, tag, ins, outs)
        moved = x.movedim(dim, 0).contiguous()
        out = torch.empty((moved.shape[0] // len(group), *moved.shape[1:]), dtype=x.dtype, device=x.device)
        _REDUCE_SCATTER(out, moved, group=self._group(group))
        return out.movedim(0, dim).contiguous()

    # --- gather kinds -----------------------------------------------------------------------------

    @_blocking
    def all_gather(self, x, group, tag, ins, outs):
        group, ins, outs = _rank_order(group, ins, outs)
        me = group.index(self.rank)
        inputs = self._all_inputs(x, group, ins)
        return geometry.gather_pieces(list(zip(inputs, ins)), outs[me][0], f"all-gather tag {tag}")

    @_blocking
    def all_to_all(self, x, group, tag, ins, outs):
        """Member j receives from each member i the part of i's input that j's output holds: one flat
        all_to_all_single with a split size per member (a backend without it: all-gather and place)."""
        if ALL_TO_ALL_SINGLE not in self.native:
            return self.all_gather.__wrapped__(self, x, group, tag, ins, outs)
        group, ins, outs = _rank_order(group, ins, outs)
        me = group.index(self.rank)
        send = [geometry.place(out_box, x, ins[me][0]) for out_box, _ in outs]
        send_flat = torch.cat([values[mask].reshape(-1) for values, mask in send])
        masks = [geometry.place(outs[me][0], torch.zeros(geometry.local_shape(box), device=x.device), box)[1]
                 for box, _ in ins]
        recv_sizes = [int(mask.sum()) for mask in masks]
        received = torch.empty(sum(recv_sizes), dtype=x.dtype, device=x.device)
        dist.all_to_all_single(received, send_flat, output_split_sizes=recv_sizes,
                               input_split_sizes=[int(mask.sum()) for _, mask in send], group=self._group(group))
        pieces, start = [], 0
        for mask, n in zip(masks, recv_sizes):
            values = torch.zeros(mask.shape, dtype=x.dtype, device=x.device)
            values[mask] = received[start:start + n]
            start += n
            pieces.append((values, mask))
        return _assemble_distinct(pieces, ins, outs[me][0], tag)

    # --- point to point ---------------------------------------------------------------------------

    def send(self, x, peer, tag):
        if self.host_p2p:
            x = x.detach().to("cpu")  # synchronous: the data is on the host before gloo reads it
        self.pending.append((dist.isend(x.contiguous(), dst=peer, tag=tag), x))

    def recv(self, peer, tag, shape, dtype):
        """Posts the receive (an irecv into a fresh buffer) and returns it in flight: the rank goes on, and
        arrived() waits for the data where an instruction first reads it. Posted in program order, so NCCL,
        which matches point to point by order per pair (not by tag), pairs them as gloo's tags do."""
        out = torch.empty(shape, dtype=dtype, device="cpu" if self.host_p2p else self.device)
        incoming = Incoming(dist.irecv(out, src=peer, tag=tag), out, self.device if self.host_p2p else None)
        self.incoming.add(incoming)
        return incoming

    def arrived(self, incoming):
        """The received tensor, once the data is there: gloo blocks the rank until it arrives; NCCL makes the
        current stream wait for the receive (the host goes on, the reader's kernels run after the data)."""
        if incoming.work is not None:
            self._wait_receive(incoming)
        return incoming.buffer

    @_blocking
    def _wait_receive(self, incoming):
        incoming.work.wait()
        incoming.work = None
        if incoming.device is not None:  # landed on the host (p2p_through_host): its readers run on the device
            incoming.buffer, incoming.device = incoming.buffer.to(incoming.device), None
        self.incoming.discard(incoming)

    @_blocking
    def finish(self):
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()
        for handle in self._buckets_in_flight:  # a bucket no reader waited for: its buffer is reused next step
            handle.work.wait()
        self._buckets_in_flight.clear()
        self._bucket_starts.clear()
        for incoming in list(self.incoming):  # received, but read by no instruction
            self._wait_receive.__wrapped__(self, incoming)


class Incoming:
    """A receive in flight: its work (None once waited), the buffer the data arrives in, and the device the buffer
    moves to once arrived (None: it arrives where it is read). The generated program holds it where the
    ExecPlan's recv names a buffer; the Runtime hands readers its tensor."""

    __slots__ = ("work", "buffer", "device")

    def __init__(self, work, buffer, device=None):
        self.work, self.buffer, self.device = work, buffer, device


class _Bucket:
    """An issued bucket: the collective's work and the sums, views of the flat buffer it sums in place."""

    __slots__ = ("work", "sums")

    def __init__(self, work, sums):
        self.work, self.sums = work, sums

    def result(self):
        return self.sums

    def take(self):
        """The sums, handed over at the wait: the handle keeps none (an activation's, reuse=False, are then freed
        with the program's last reader; a gradient bucket's stay in the Communicator's kept buffer)."""
        sums, self.sums = self.sums, None
        return sums


class _Scattered:
    """An issued reduce-scatter start: its work and the sums it writes (reduce_scatter_tensor's chunk, moved back
    along `dim`; or the flat all-reduce's sums, each restricted from its input box to this member's output box).
    The result is made once, so a chained start and the wait read one tensor."""

    __slots__ = ("work", "sums", "dim", "boxes", "_result")

    def __init__(self, work, sums, dim, boxes=None):
        self.work, self.sums, self.dim, self.boxes, self._result = work, sums, dim, boxes, None

    def result(self):
        if self._result is None:
            if self.boxes is None:
                self._result = tuple(s.movedim(0, self.dim).contiguous() for s in self.sums)
            else:
                self._result = tuple(geometry.restrict(s, in_box, out_box) for s, (in_box, out_box) in zip(self.sums, self.boxes))
        return self._result

    def take(self):
        """The outputs, handed over at the wait: the handle keeps neither them (the copy a chained start made the
        wait read) nor the sums they were cut from."""
        result = self.result()
        self.sums = self._result = None
        return result


class _Gathered:
    """An issued all-gather start: its work, every member's flat buffer (rank order), each member's pieces and
    their sizes within it, and this member's output boxes."""

    __slots__ = ("work", "gathered", "pieces", "sizes", "out_boxes", "tag", "_result")

    def __init__(self, work, gathered, pieces, sizes, out_boxes, tag):
        self.work, self.gathered, self.pieces, self.sizes, self.out_boxes, self.tag = \
            work, gathered, pieces, sizes, out_boxes, tag
        self._result = None

    def result(self):
        if self._result is None:
            self._result = self._placed()
        return self._result

    def take(self):
        """The gathered tensors, handed over at the wait: the handle keeps neither them (the copy a chained start
        made the wait read) nor the members' flat buffers they were placed from."""
        result = self.result()
        self.gathered = self._result = None
        return result

    def _placed(self):
        inputs = [[] for _ in self.out_boxes]  # by tensor: every member's (values, piece)
        for flat, member, sizes in zip(self.gathered, self.pieces, self.sizes):
            start = 0
            for i, (piece, n) in enumerate(zip(member, sizes)):
                inputs[i].append((flat[start:start + n].reshape(geometry.local_shape(piece[0])), piece))
                start += n
        return tuple(geometry.gather_pieces(pieces, box, f"all-gather start #{self.tag}")
                     for pieces, box in zip(inputs, self.out_boxes))


def _rank_order(group, ins, outs):
    """The members, their inputs and outputs in the process group's rank order (ascending global rank), which
    torch's list and chunk arguments follow; the ExecPlan lists them in piece order."""
    order = sorted(range(len(group)), key=lambda k: group[k])
    return [group[k] for k in order], [ins[k] for k in order], [outs[k] for k in order]


def _assemble_distinct(pieces, ins, out_box, tag):
    """The all-to-all's output from what each member sent: replicas (equal pieces) count once."""
    out, held, seen = None, None, []
    for (values, mask), piece in zip(pieces, ins):
        if any(geometry.same_piece(piece, p) for p in seen):
            continue
        seen.append(piece)
        out = values if out is None else torch.where(mask, values, out)
        held = mask.long() if held is None else held + mask.long()
    if bool((held != 1).any()):
        raise geometry.PieceError(f"all-to-all tag {tag}: output {out_box} is not covered exactly once")
    return out


def _even_split_dim(ins, outs):
    """The dim along which the members' outputs split their common input box evenly and contiguously, in rank
    order (what reduce_scatter_tensor computes); None when they do not."""
    boxes = {tuple(map(tuple, box)) for box, _ in ins}
    if len(boxes) != 1:
        return None
    box = next(iter(boxes))
    n = len(outs)
    for d, (start, stop, step) in enumerate(box):
        size = len(range(start, stop, step))
        if step != 1 or size % n:
            continue
        chunk = size // n
        ok = True
        for k, (out_box, _) in enumerate(outs):
            for e, r in enumerate(out_box):
                want = (start + k * chunk, start + (k + 1) * chunk, 1) if e == d else tuple(box[e])
                if tuple(r) != want:
                    ok = False
        if ok:
            return d
    return None
