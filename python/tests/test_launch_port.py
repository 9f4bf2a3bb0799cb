"""The launcher's port: picked free, bound only when rank 0 starts its store, so a process starting beside may
take it first (EADDRINUSE). The launch then runs again on a new port instead of failing."""

import socket

from conftest import emit_shrunk

from loom.runtime import launch as launch_module


def test_a_port_taken_before_rank_0_binds_it_is_replaced(run_loom, tmp_path, monkeypatch):
    directory = emit_shrunk(run_loom, tmp_path, "gpt3-125m", ["--policy", "dp", "--dp", "2", "--gpus", "2"])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        taken.bind(("", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picked = []
        real = launch_module._free_port

        def first_busy():
            picked.append(busy if not picked else real())
            return picked[-1]

        monkeypatch.setattr(launch_module, "_free_port", first_busy)
        values = launch_module.launch(directory, timeout=120)
    assert len(picked) == 2 and picked[0] == busy and picked[1] != busy
    assert "loss" in values
