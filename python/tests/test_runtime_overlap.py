"""Gradient buckets (docs/codegen.md, "Gradient buckets and exchanges"): the runtime's flat, asynchronous
all-reduce sums exactly what separate all-reduces sum, and the generated data-parallel program reduces its
gradients in buckets, each issued right after its last gradient is written and waited for later (the
shrunk model's gradients fit one bucket; tests/exec/passes_test.cc checks the assignment and
the overlap with small caps)."""

import datetime
import os
import re
import socket
import weakref

import torch
import torch.multiprocessing as mp
from conftest import emit_shrunk


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _bucket_worker(rank, world, port, out):
    import torch.distributed as dist

    from loom.runtime.comm import Communicator

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    group = list(range(world))
    comm = Communicator(rank, world, [group], torch.device("cpu"))
    generator = torch.Generator().manual_seed(rank)
    shapes = [(3, 5), (7,), (2, 3, 4), ()]
    # Integer-valued floats: any order of the sum is exact, so bucketed and separate sums must be equal.
    xs = [torch.randint(-50, 50, s, generator=generator).float() for s in shapes]
    handle = comm.all_reduce_start(xs, group)
    separate = []
    for x in xs:
        total = x.clone()
        dist.all_reduce(total, group=comm._group(group))
        separate.append(total)
    bucketed = comm.wait(handle)
    # An activation's partial sums (Oases' overlap): the same sums, from a buffer the runtime does not keep.
    kept = len(comm._bucket_buffers)
    fresh = comm.wait(comm.all_reduce_start(xs, group, bucket=7, reuse=False))
    assert len(comm._bucket_buffers) == kept and len(comm._buckets_in_flight) == 1
    assert all(torch.equal(a, b) for a, b in zip(fresh, bucketed))
    torch.save({"bucketed": [b.clone() for b in bucketed], "separate": separate, "inputs": xs}, out / f"{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def _run_ranks(worker, world, out):
    """Runs worker(rank, world, port, out) on `world` gloo processes; every one must exit cleanly."""
    context = mp.get_context("forkserver")
    port = _free_port()
    processes = [context.Process(target=worker, args=(r, world, port, out)) for r in range(world)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(120)
    assert [p.exitcode for p in processes] == [0] * world
    return [torch.load(out / f"{r}.pt") for r in range(world)]


def test_bucket_sums_what_separate_all_reduces_sum(tmp_path):
    world = 2
    results = _run_ranks(_bucket_worker, world, tmp_path)
    want = [sum(r["inputs"][k] for r in results) for k in range(len(results[0]["inputs"]))]
    for r in results:
        for got, separate, expected, x in zip(r["bucketed"], r["separate"], want, r["inputs"]):
            assert got.shape == x.shape
            assert torch.equal(got, separate) and torch.equal(got, expected)


def _reused_bucket_worker(rank, world, port, out):
    import torch.distributed as dist

    from loom.runtime.comm import Communicator
    from loom.runtime.runtime import Runtime

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    group = list(range(world))
    comm = Communicator(rank, world, [group], torch.device("cpu"))
    manifest = {"tensors": {"g": {"shape": [3, 5], "dtype": "f32", "role": "gradient"}}, "sub_ops": {}}
    rt = Runtime(manifest, rank, comm=comm)
    generator = torch.Generator().manual_seed(rank)
    steps = []
    for step in range(3):
        # Two starts of one bucket in a step (as a program of several micro-batches may issue): two buffers.
        xs = [torch.randint(-50, 50, s, generator=generator).float() for s in [(3, 5), (7,)]]
        ys = [x * 2 + step for x in xs]
        first, second = rt.all_reduce_start(xs, group, 3), rt.all_reduce_start(ys, group, 3)
        sums, doubled = rt.wait(first), rt.wait(second)
        rt.keep("g", sums[0], (((0, 3, 1), (0, 5, 1)), (0, 1)))  # a bucket's sum kept past the step
        steps.append({"inputs": xs, "doubled_inputs": ys, "sums": [x.clone() for x in sums],
                      "doubled": [y.clone() for y in doubled],
                      "buffers": [sums[0].untyped_storage().data_ptr(), doubled[0].untyped_storage().data_ptr()]})
        rt.finish()
        steps[-1]["kept"] = rt.next_step()[0][2]
    torch.save({"steps": steps, "kept_after": [s["kept"].clone() for s in steps]}, out / f"{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def test_bucket_buffers_are_reused_across_steps_and_kept_sums_survive_them(tmp_path):
    """A bucket's flat buffer is allocated once and filled again every step (DDP keeps its buckets too); two
    starts of one bucket in a step fill two buffers; a kept sum is the runtime's own copy, so the next step's
    bucket does not overwrite it."""
    results = _run_ranks(_reused_bucket_worker, 2, tmp_path)
    for r in results:
        buffers = [s["buffers"] for s in r["steps"]]
        assert buffers[0][0] != buffers[0][1] and buffers[1] == buffers[0] and buffers[2] == buffers[0]
        for step, (s, kept) in enumerate(zip(r["steps"], r["kept_after"])):
            for k in range(2):
                assert torch.equal(s["sums"][k], sum(o["steps"][step]["inputs"][k] for o in results))
                assert torch.equal(s["doubled"][k], sum(o["steps"][step]["doubled_inputs"][k] for o in results))
            assert torch.equal(kept, s["sums"][0]), f"step {step + 1}'s kept sum changed after later steps"


def test_data_parallel_program_reduces_gradients_in_overlapped_buckets(tmp_path, run_loom):
    directory = emit_shrunk(run_loom, tmp_path, "gpt3-125m", ["--policy", "dp", "--dp", "2", "--gpus", "2"])
    for rank in range(2):
        lines = (directory / f"rank_{rank}.py").read_text().splitlines()
        issues = [i for i, line in enumerate(lines) if "= rt.all_reduce_start(" in line]
        waits = {re.search(r"rt\.wait\((\w+)\)", line).group(1): i for i, line in enumerate(lines) if "rt.wait(" in line}
        assert issues and len(waits) == len(issues)
        # No gradient is all-reduced one by one any more.
        assert not [line for line in lines if "= rt.all_reduce(" in line and "_grad__" in line]
        for i in issues:
            handle = lines[i].split(" = ")[0].strip()
            assert i < waits[handle]
            # Issued right after the statement that writes its last gradient part.
            last_input = lines[i].split("rt.all_reduce_start((")[1].split(")")[0].split(", ")[-1].rstrip(",")
            writer = next(line for line in reversed(lines[:i]) if not line.lstrip().startswith("#"))
            assert last_input in writer.split(" = ")[0], (writer, last_input)


def _gather_worker(rank, world, port, out):
    import torch.distributed as dist

    from loom.runtime.comm import Communicator

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    group = [1, 0]  # listed in piece order, not rank order: member k holds piece k
    comm = Communicator(rank, world, [group], torch.device("cpu"))
    whole_a, whole_b = torch.arange(20.0).reshape(5, 4), torch.arange(8.0) * 10
    # Uneven shards, so the members' flat buffers differ in length: a's rows [0:3] / [3:5], b's halves.
    rows_a, halves_b = [(0, 3, 1), (3, 5, 1)], [(0, 4, 1), (4, 8, 1)]
    ins = [[((rows_a[k], (0, 4, 1)), (0, 1)) for k in range(2)], [((halves_b[k],), (0, 1)) for k in range(2)]]
    outs = [[(((0, 5, 1), (0, 4, 1)), (0, 1))] * 2, [(((0, 8, 1),), (0, 1))] * 2]
    k = group.index(rank)
    xs = (whole_a[slice(*rows_a[k][:2])].clone(), whole_b[slice(*halves_b[k][:2])].clone())
    handle = comm.all_gather_start(xs, group, 7, ins, outs)
    blocking = [comm.all_gather(x, group, 8, piece_ins, piece_outs) for x, piece_ins, piece_outs in zip(xs, ins, outs)]
    gathered = comm.wait(handle)
    torch.save({"gathered": list(gathered), "blocking": blocking, "wholes": [whole_a, whole_b]}, out / f"{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def test_gather_start_places_what_blocking_all_gathers_place(tmp_path):
    """ZeRO-3's prefetched parameters (docs/codegen.md, "Parameter prefetch"): one flat, asynchronous all-gather
    of several tensors' uneven shards places each tensor whole, as a blocking all-gather of each does."""
    for result in _run_ranks(_gather_worker, 2, tmp_path):
        for got, blocking, whole in zip(result["gathered"], result["blocking"], result["wholes"]):
            assert torch.equal(got, whole) and torch.equal(blocking, whole)


def _statements(lines):
    return [(i, line) for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")]


def test_zero3_program_prefetches_parameters_one_ahead(tmp_path, run_loom):
    """ZeRO-3's parameter all-gathers are started one reader ahead (DeepSpeed's prefetch) and waited for right
    before the statement that reads them; none is left blocking."""
    directory = emit_shrunk(run_loom, tmp_path, "gpt3-125m",
                            ["--policy", "zero", "--zero", "3", "--dp", "2", "--gpus", "2", "--microbatches", "2"])
    for rank in range(2):
        statements = _statements((directory / f"rank_{rank}.py").read_text().splitlines())
        assert not [line for _, line in statements if "= rt.all_gather(" in line]
        starts = {line.split(" = ")[0].strip(): k for k, (_, line) in enumerate(statements) if "= rt.all_gather_start(" in line}
        waits = []  # (statement index, handle, outputs), in order
        for k, (_, line) in enumerate(statements):
            if "= rt.wait(gather_" in line:
                waits.append((k, re.search(r"rt\.wait\((\w+)\)", line).group(1),
                              [v.strip() for v in line.split(" = ")[0].split(",") if v.strip()]))
        assert len(starts) == len(waits) > 10
        for n, (k, handle, outputs) in enumerate(waits):
            assert starts[handle] < k
            # Right before the first statement reading the gathered parameters (the next gather's start aside).
            reader = next(line for _, line in statements[k + 1:] if "= rt.all_gather_start(" not in line)
            assert any(re.search(rf"\b{v}\b", reader.split(" = ", 1)[-1]) for v in outputs), (reader, outputs)
            if n > 0:  # started right where the previous gather is waited for, before its reader
                previous = waits[n - 1][0]
                assert statements[previous + 1][1].lstrip().startswith(handle + " = rt.all_gather_start("), handle


def _chain_worker(rank, world, port, out):
    import torch.distributed as dist

    from loom.runtime.comm import Communicator

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    pair, across = [2 * (rank // 2), 2 * (rank // 2) + 1], [rank % 2, rank % 2 + 2]
    comm = Communicator(rank, world, [[0, 1], [2, 3], [0, 2], [1, 3]], torch.device("cpu"))
    whole = ((0, 4, 1), (0, 3, 1))
    halves = [((0, 2, 1), (0, 3, 1)), ((2, 4, 1), (0, 3, 1))]
    x = torch.randint(-50, 50, (4, 3), generator=torch.Generator().manual_seed(rank)).float()
    k = pair.index(rank)
    # The layout search's chain for a partial sum over two pairs: each member's part of 4 summed inside its pair
    # into its half (part of 2), the halves summed across the pairs, the whole gathered inside the pair.
    scatter_ins = [[(whole, (m, 4)) for m in range(2)]]
    scatter_outs = [[(halves[m], (0, 2)) for m in range(2)]]
    gather_ins = [[(halves[m], (0, 1)) for m in range(2)]]
    gather_outs = [[(whole, (0, 1))] * 2]
    scatter = comm.reduce_scatter_start((x,), pair, 1, scatter_ins, scatter_outs)
    total = comm.all_reduce_start((comm.chained(scatter, 0),), across, bucket=2, reuse=False)
    gather = comm.all_gather_start((comm.chained(total, 0),), pair, 3, gather_ins, gather_outs)
    started = [comm.wait(scatter)[0], comm.wait(total)[0], comm.wait(gather)[0]]
    half = comm.reduce_scatter(x, pair, 4, scatter_ins[0], scatter_outs[0])
    summed = comm.all_reduce(half, across, 5, [(halves[k], (0, 2))] * 2, [(halves[k], (0, 1))] * 2)
    blocking = [half, summed, comm.all_gather(summed, pair, 6, gather_ins[0], gather_outs[0])]
    torch.save({"started": started, "blocking": blocking, "x": x}, out / f"{rank}.pt")
    # A generated program keeps its handle variables to its end: the outputs its waits handed over must go with
    # the program's own `del`s, the handles (all three kinds) alive.
    watched = [weakref.ref(t) for t in started]
    del started
    assert all(w() is None for w in watched), f"rank {rank}: a waited start's handle keeps its outputs alive"
    assert scatter.work is not None and total.work is not None and gather.work is not None
    dist.barrier()
    dist.destroy_process_group()


def test_chained_starts_sum_what_the_blocking_chain_sums(tmp_path):
    """Oases' overlap of a hierarchical sum (docs/overlap.md): a reduce-scatter start inside each pair, an all-reduce
    start across the pairs chained on its output and an all-gather start inside the pair chained on the all-reduce's,
    on 4 gloo ranks as 2 pairs, give each link what the blocking chain gives, and the whole sum of the 4 inputs."""
    results = _run_ranks(_chain_worker, 4, tmp_path)
    want = sum(r["x"] for r in results)
    for rank, r in enumerate(results):
        for got, blocking in zip(r["started"], r["blocking"]):
            assert torch.equal(got, blocking)
        rows = slice(0, 2) if rank % 2 == 0 else slice(2, 4)
        assert torch.equal(r["started"][1], want[rows])
        assert torch.equal(r["started"][2], want)
