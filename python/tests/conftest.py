"""Shared fixtures: the package on sys.path, and the engine binary ($LOOM, else build/loom)."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))


def _has_huggingface_fx():
    try:
        import transformers.utils.fx  # noqa: F401
    except ImportError:
        return False
    return True


# transformers' torch.fx tracer (transformers.utils.fx), which transformers 5 removed. Where it is absent, HuggingFace
# models are captured by the export route (capture="auto" picks it): tests of a transformers model that name
# capture="fx" take HF_CAPTURE instead, and the fx half of a test run on both routes is skipped (HF_ROUTES).
HAS_HF_FX = _has_huggingface_fx()
HF_CAPTURE = "fx" if HAS_HF_FX else "export"


def _transformers_version():
    try:
        import transformers
    except ImportError:
        return "absent"
    return transformers.__version__


NO_HF_FX = f"transformers {_transformers_version()} has no torch.fx tracer (transformers.utils.fx, removed in 5.0)"
needs_hf_fx = pytest.mark.skipif(not HAS_HF_FX, reason=NO_HF_FX)
HF_ROUTES = [pytest.param("fx", marks=needs_hf_fx), "export"]


@pytest.fixture(scope="session")
def loom_binary():
    path = os.environ.get("LOOM") or str(ROOT / "build" / "loom")
    if not os.path.exists(path):
        pytest.skip(f"no engine binary at {path}: build it, or set LOOM")
    return path


@pytest.fixture(scope="session")
def engine(loom_binary):
    """The extension built beside the binary, first on sys.path (a build without it is skipped, saying so)."""
    extension_dir = pathlib.Path(loom_binary).resolve().parent / "python"
    if not list(extension_dir.glob("_loom_engine*.so")):
        pytest.skip(f"no _loom_engine extension in {extension_dir}: configure with -DLOOM_PYTHON=.venv/bin/python "
                    f"(make build does)")
    import loom.api

    if loom.api._loom_engine is None:  # not on PYTHONPATH (ctest puts it there) when loom was first imported
        import importlib

        sys.path.insert(0, str(extension_dir))
        importlib.reload(loom.api)
    return loom.api


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
