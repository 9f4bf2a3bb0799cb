"""Shared fixtures: the package on sys.path, and the engine binary ($LOOM, else build/loom)."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


@pytest.fixture(scope="session")
def loom_binary():
    path = os.environ.get("LOOM") or str(ROOT / "build" / "loom")
    if not os.path.exists(path):
        pytest.skip(f"no engine binary at {path}: build it, or set LOOM")
    return path


@pytest.fixture()
def run_loom(loom_binary):
    return loom_runner(loom_binary)


def loom_runner(loom_binary):
    """run(*args) -> CompletedProcess of the engine binary (for module-scoped fixtures)."""
    def run(*args):
        return subprocess.run([loom_binary, *args], capture_output=True, text=True, timeout=120)
    return run


def emit_shrunk(run, directory, model, policy_args):
    """`loom plan --shrink --emit` of a 2-layer float32 preset: the rank modules' directory."""
    result = run("plan", "--model", model, "--layers", "2", "--dtype", "f32", "--shrink", *policy_args,
                 "--out", str(directory / "out"), "--emit", str(directory / "emit"))
    assert result.returncode == 0, result.stdout + result.stderr
    return directory / "emit"
