"""A recv runs as exec_plan.h defines it: posted where the program has it, its data waited for by the first
instruction that reads it, not at the recv's position (runtime.Runtime, comm.Incoming).

The two-rank program below deadlocks if a recv blocks where it stands: rank 1 posts its recv, then computes
something independent and sends it; rank 0 sends rank 1's data only after it has read that result (the
sender sends late). So the run finishing at all shows the independent compute ran before the wait; the
ordering log shows where each rank waited, and the values that every reader got the received data."""

import datetime
import json
import os
import socket

import torch
import torch.multiprocessing as mp

from loom.runtime import programs
from loom.runtime.initial import initial_value
from loom.runtime.launch import load_manifest, read_timing, train

STEPS = 2
BOX = ((0, 4, 1),)
PIECE = (BOX, (0, 1))
SPEC = {"dtype": "f32", "full": [4], "offset": [0], "shape": [4], "step": [1]}
TENSORS = {
    "x": {"role": "input", "dtype": "f32", "shape": [4], "init": "uniform"},
    "w": {"role": "activation", "dtype": "f32", "shape": [4], "init": "zeros"},
    "u": {"role": "activation", "dtype": "f32", "shape": [4], "init": "zeros"},
    "v": {"role": "activation", "dtype": "f32", "shape": [4], "init": "zeros"},
}
MANIFEST = {"format": 2, "world_size": 2, "description": "recv then independent compute", "groups": [], "loads": [[], []],
            "plan_id": "0" * 64,  # written by hand: no ExecPlan to hash (restamp records the programs' sha256)
            "ranks": ["rank_0.py", "rank_1.py"], "tensors": TENSORS,
            "sub_ops": {"0": {"name": "add", "type": "add", "attrs": {}, "inputs": [SPEC, SPEC], "outputs": [SPEC],
                              "shape_only": []}}}
PROGRAMS = {
    0: f"""
def step(rt):
    x = rt.load("x", {PIECE!r})
    y = rt.recv(peer=1, tag=1, piece={PIECE!r}, dtype="f32")
    w, = rt.compute(0, x, y)  # x + 2x, read only after rank 1 sent it
    rt.send(w, peer=1, tag=0)  # late: rank 1 posted its recv long before
    rt.keep("w", w, {PIECE!r})
""",
    1: f"""
def step(rt):
    x = rt.load("x", {PIECE!r})
    v = rt.recv(peer=0, tag=0, piece={PIECE!r}, dtype="f32")
    y, = rt.compute(0, x, x)  # independent of v
    rt.send(y, peer=0, tag=1)
    u, = rt.compute(0, v, y)  # the first reader of v: waits here
    rt.keep("v", v, {PIECE!r})  # a second reader: v has arrived
    rt.keep("u", u, {PIECE!r})
""",
}


def write_program(directory):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_text(json.dumps(MANIFEST))
    for rank, text in PROGRAMS.items():
        (directory / f"rank_{rank}.py").write_text(text)
    programs.restamp(directory)
    return directory


def x_of_step(step):
    return initial_value("x", TENSORS["x"], 1, TENSORS, step=step).float()


def test_recv_waits_at_its_first_reader_so_a_late_send_does_not_deadlock(tmp_path):
    directory = write_program(tmp_path / "emit")
    losses, values = train(directory, STEPS, out=tmp_path / "out", timeout=60, timed=True)
    x = x_of_step(STEPS - 1)
    assert torch.equal(values["w"], x + (x + x))
    assert torch.equal(values["v"], values["w"])
    assert torch.equal(values["u"], values["w"] + (x + x))
    timing = read_timing(tmp_path / "out")
    for rank, entry in enumerate(timing):  # the hook counts the statements of the later step
        calls = {kind: count for kind, (_, count) in entry["kinds"].items() if ": " not in kind}
        assert calls["recv"] == 1 and calls["send"] == 1 and calls["load"] == 1
        assert calls["compute forward"] == 1 + rank
        assert calls["keep"] == 1 + rank


def _two_ranks(target, *args):
    """Runs target(rank, port, *args) in two processes joined by gloo; asserts both exit cleanly."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    context = mp.get_context("forkserver")
    processes = [context.Process(target=target, args=(rank, port, *args)) for rank in range(2)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(120)
    assert [p.exitcode for p in processes] == [0, 0]


def _join(rank, port):
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    return dist


def _logged_worker(rank, port, directory, out):
    """Runs rank's program one step with every runtime call and every wait for a receive logged in order."""
    from loom.runtime.comm import Communicator
    from loom.runtime.launch import _rank_module
    from loom.runtime.runtime import Runtime

    dist = _join(rank, port)
    manifest = load_manifest(directory)
    comm = Communicator(rank, 2, manifest["groups"], torch.device("cpu"))
    rt = Runtime(manifest, rank, comm=comm)
    log = []
    arrived = comm.arrived

    def logged_arrived(incoming):
        if incoming.work is not None:
            log.append("wait")
        return arrived(incoming)

    comm.arrived = logged_arrived
    for name in ("load", "recv", "compute", "send", "keep"):
        def logged(*args, _method=getattr(rt, name), _name=name, **kwargs):
            result = _method(*args, **kwargs)
            log.append(_name)  # after the call: a wait inside it comes first
            return result
        setattr(rt, name, logged)
    _rank_module(directory, rank).step(rt)
    rt.finish()
    torch.save({"log": log, "in_flight": len(comm.incoming)}, out / f"{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def test_ordering_log_shows_independent_compute_and_send_before_the_wait(tmp_path):
    _two_ranks(_logged_worker, write_program(tmp_path / "emit"), tmp_path)
    logs = [torch.load(tmp_path / f"{r}.pt") for r in range(2)]
    assert logs[0]["log"] == ["load", "recv", "wait", "compute", "send", "keep"]
    assert logs[1]["log"] == ["load", "recv", "compute", "send", "wait", "compute", "keep", "keep"]
    assert [entry["in_flight"] for entry in logs] == [0, 0]


def _unread_worker(rank, port, out):
    """Rank 1 receives a buffer that no instruction reads: the step's end (finish) waits for it."""
    from loom.runtime.comm import Communicator
    from loom.runtime.runtime import Runtime

    dist = _join(rank, port)
    comm = Communicator(rank, 2, [], torch.device("cpu"))
    rt = Runtime(MANIFEST, rank, comm=comm)
    if rank == 0:
        rt.send(torch.arange(4.0), peer=1, tag=5)
    else:
        incoming = rt.recv(peer=0, tag=5, piece=PIECE, dtype="f32")
        assert len(comm.incoming) == 1
    rt.finish()
    result = {"in_flight": len(comm.incoming)}
    if rank == 1:
        result["buffer"] = incoming.buffer
        result["waited"] = incoming.work is None
    torch.save(result, out / f"{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


def test_finish_waits_for_a_receive_no_instruction_read(tmp_path):
    _two_ranks(_unread_worker, tmp_path)
    received = torch.load(tmp_path / "1.pt")
    assert received["waited"] and received["in_flight"] == 0
    assert torch.equal(received["buffer"], torch.arange(4.0))
