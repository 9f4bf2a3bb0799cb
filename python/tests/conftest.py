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
    def run(*args):
        return subprocess.run([loom_binary, *args], capture_output=True, text=True, timeout=120)
    return run
