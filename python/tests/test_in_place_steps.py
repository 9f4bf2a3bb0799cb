"""In-place optimizer steps (docs/codegen.md, "In-place optimizer steps"): codegen marks the inputs of an optimizer
step that no later instruction reads (`rt.compute(..., donate=...)`); the runtime updates those in place when they
are its own (a previous step's results) and copies the caller's values (the module's weights on the first step).
The values are the copying program's, bit for bit, and the caller's tensors are never written."""

import re

import pytest
import torch

from conftest import emit_shrunk, loom_runner
from loom.runtime import launch
from loom.runtime.runtime import Runtime


@pytest.fixture(scope="module", params=["adamw", "sgd"])
def emitted(request, loom_binary, tmp_path_factory):
    """A 1-device program of gpt3-125m (AdamW, or SGD with momentum) with its donations, and the same program
    without them (every optimizer input copied, as before donations existed)."""
    directory = tmp_path_factory.mktemp(f"in_place_{request.param}")
    optimizer = ["--optimizer", request.param] + (["--momentum", "0.9"] if request.param == "sgd" else [])
    emit = emit_shrunk(loom_runner(loom_binary), directory, "gpt3-125m", ["--policy", "dp", "--dp", "1", *optimizer, "--gpus", "1"])
    program = (emit / "rank_0.py").read_text()
    assert program.count("donate=") > 0
    copying = directory / "copying"
    copying.mkdir()
    (copying / "rank_0.py").write_text(re.sub(r", donate=\([0-9, ]*\)", "", program))
    (copying / "manifest.json").write_text((emit / "manifest.json").read_text())
    return emit, copying


def _run(directory, steps, initial=None):
    manifest = launch.load_manifest(directory)
    losses, kept = launch.run_rank(directory, manifest, 0, steps=steps, initial=initial)
    return [float(step[0][2]) for step in losses], {name: value for name, _, value in kept}


def test_in_place_steps_equal_copying_steps_bit_for_bit(emitted):
    emit, copying = emitted
    losses, values = _run(emit, 3)
    copied_losses, copied_values = _run(copying, 3)
    assert losses == copied_losses
    assert values.keys() == copied_values.keys()
    for name, value in values.items():
        assert torch.equal(value, copied_values[name]), name


def test_the_callers_values_are_never_written(emitted):
    emit, _ = emitted
    manifest = launch.load_manifest(emit)
    parameters = {n: e for n, e in manifest["tensors"].items() if e.get("role") == "parameter" and "updates" not in e}
    given = {n: torch.randn(e["shape"]) for n, e in parameters.items()}
    before = {n: v.clone() for n, v in given.items()}
    losses, _ = _run(emit, 3, initial=given)
    assert len(losses) == 3
    for name, value in given.items():
        assert torch.equal(value, before[name]), f"the run wrote the caller's '{name}'"


def test_later_steps_write_their_own_previous_results(emitted):
    """From the second step on, an updated parameter is written into the storage the step loaded (no copy)."""
    emit, _ = emitted
    manifest = launch.load_manifest(emit)
    rt = Runtime(manifest, 0)
    program = launch._rank_module(emit, 0)
    program.step(rt)
    rt.finish()
    first = {name: value for name, _, value in rt.kept}
    rt.next_step()
    program.step(rt)
    rt.finish()
    second = {name: value for name, _, value in rt.kept}
    updated = [n for n, e in manifest["tensors"].items() if "updates" in e]
    assert updated
    copied = [n for n in updated if second[n].data_ptr() != first[n].data_ptr()]
    assert not copied, f"a later step copied its own previous results {copied[:5]}"
