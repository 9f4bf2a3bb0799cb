"""Collective paths from the backend's capabilities (issue 17, "Collective fallback"; comm.native_collectives):
decided once per communicator, never from an exception, so a collective that fails (a timeout, a lost peer)
raises instead of silently switching this rank to another collective than its peers'. gloo's all-to-all takes
members' pieces of different sizes (one flat all_to_all_single with split sizes) and equals the all-gather
path element for element."""

import datetime
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from loom.runtime import comm as comm_module
from loom.runtime.comm import (ALL_TO_ALL_SINGLE, REDUCE_SCATTER_TENSOR, Communicator, native_collectives,
                               p2p_through_host)


def test_paths_follow_the_backend_and_torch_version():
    assert native_collectives("gloo", "2.13.0+cpu") == {REDUCE_SCATTER_TENSOR, ALL_TO_ALL_SINGLE}
    assert native_collectives("gloo", "2.1.2") == {ALL_TO_ALL_SINGLE}  # gloo's reduce_scatter_tensor: torch 2.2
    assert native_collectives("nccl", "2.1.0") == {REDUCE_SCATTER_TENSOR, ALL_TO_ALL_SINGLE}
    assert native_collectives("mpi", "2.13.0") == frozenset()


@pytest.fixture()
def one_rank_gloo():
    """This process as a 1-rank gloo world (an in-memory store), destroyed afterwards."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        yield
    finally:
        dist.destroy_process_group()


BOX = [[0, 4, 1], [0, 3, 1]]
IN, OUT = [(BOX, (0, 1))], [(BOX, (0, 1))]


def test_a_failing_collective_raises_instead_of_falling_back(one_rank_gloo, monkeypatch):
    comm = Communicator(0, 1, [[0]], torch.device("cpu"), timeout=datetime.timedelta(seconds=30))
    assert comm.native == {REDUCE_SCATTER_TENSOR, ALL_TO_ALL_SINGLE}
    x = torch.arange(12.0).reshape(4, 3)
    assert torch.equal(comm.reduce_scatter(x, [0], 1, IN, OUT), x)
    assert torch.equal(comm.all_to_all(x, [0], 2, IN, OUT), x)

    def lost_peer(*args, **kwargs):
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer")

    # Formerly caught: the rank switched to an all-reduce (or all-gather) for good while its peers did not.
    monkeypatch.setattr(comm_module, "_REDUCE_SCATTER", lost_peer)
    monkeypatch.setattr(comm_module.dist, "all_to_all_single", lost_peer)
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        comm.reduce_scatter(x, [0], 3, IN, OUT)
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        comm.all_to_all(x, [0], 4, IN, OUT)
    assert not hasattr(comm, "fallbacks")


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


# Member r holds rows IN_ROWS[r] of a 6 x 2 tensor and wants rows OUT_ROWS[r]: pieces of different sizes each way.
IN_ROWS = [(0, 4), (4, 6)]
OUT_ROWS = [(0, 1), (1, 6)]


def _exchange_worker(rank, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    comm = Communicator(rank, 2, [[0, 1]], torch.device("cpu"), timeout=datetime.timedelta(seconds=60))
    whole = torch.arange(12.0).reshape(6, 2)
    ins = [([[a, b, 1], [0, 2, 1]], (0, 1)) for a, b in IN_ROWS]
    outs = [([[a, b, 1], [0, 2, 1]], (0, 1)) for a, b in OUT_ROWS]
    mine = whole[IN_ROWS[rank][0]:IN_ROWS[rank][1]].clone()
    exchanged = comm.all_to_all(mine, [0, 1], 7, ins, outs)
    gathered = comm.all_gather(mine, [0, 1], 8, ins, outs)
    torch.save((exchanged, gathered, whole[OUT_ROWS[rank][0]:OUT_ROWS[rank][1]]), out / f"rank_{rank}.pt")
    dist.destroy_process_group()


def test_all_to_all_moves_pieces_of_different_sizes_as_all_gather_places_them(tmp_path):
    mp.start_processes(_exchange_worker, args=(_free_port(), tmp_path), nprocs=2, start_method="spawn")
    for rank in range(2):
        exchanged, gathered, expected = torch.load(tmp_path / f"rank_{rank}.pt")
        assert torch.equal(exchanged, expected) and torch.equal(gathered, expected), rank


def test_point_to_point_goes_through_the_host_only_for_gloo_off_the_cpu():
    # gloo's TCP pair writes a CUDA tensor's pointer and fails ("writev ... Bad address", torch 2.11 on an H200):
    # every pipeline plan failed there while the collectives ran.
    assert p2p_through_host("gloo", "cuda")
    assert p2p_through_host("gloo", torch.device("cuda", 1))
    assert not p2p_through_host("gloo", "cpu")
    assert not p2p_through_host("nccl", "cuda")


def _host_p2p_worker(rank, port, out):
    """Rank 0 sends two tensors (one a strided view) to rank 1 through the host path, as gloo on cuda takes it."""
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "localhost", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    comm = Communicator(rank, 2, [[0, 1]], torch.device("cpu"), timeout=datetime.timedelta(seconds=60))
    comm.host_p2p = True  # what p2p_through_host says for gloo on cuda; this machine has no GPU
    sent = []
    real_isend = dist.isend

    def isend(tensor, **kwargs):
        sent.append(tensor.device.type)
        return real_isend(tensor, **kwargs)

    comm_module.dist.isend = isend
    whole = torch.arange(12.0).reshape(3, 4)
    if rank == 0:
        comm.send(whole, 1, 5)
        comm.send(whole.t(), 1, 6)
        comm.finish()
        torch.save({"sent": sent}, out / "rank_0.pt")
    else:
        first, second = comm.recv(0, 5, (3, 4), torch.float32), comm.recv(0, 6, (4, 3), torch.float32)
        in_flight = (first.device, first.work is not None)
        got = (comm.arrived(first), comm.arrived(second))
        comm.finish()
        torch.save({"got": got, "in_flight": in_flight, "after": (first.device, first.work, len(comm.incoming))},
                   out / "rank_1.pt")
    dist.destroy_process_group()


def test_point_to_point_through_the_host_delivers_the_tensor_on_the_device(tmp_path):
    mp.start_processes(_host_p2p_worker, args=(_free_port(), tmp_path), nprocs=2, start_method="spawn")
    assert torch.load(tmp_path / "rank_0.pt")["sent"] == ["cpu", "cpu"]
    received = torch.load(tmp_path / "rank_1.pt")
    whole = torch.arange(12.0).reshape(3, 4)
    assert torch.equal(received["got"][0], whole) and torch.equal(received["got"][1], whole.t())
    assert received["in_flight"] == (torch.device("cpu"), True)  # waiting to move to the device once arrived
    assert received["after"] == (None, None, 0)  # moved, waited, nothing left in flight
