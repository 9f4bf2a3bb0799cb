"""A fail-fast launcher (issue 17, "Runtime timeouts"; docs/codegen.md, "Launcher"): --timeout bounds each
collective, not the run; the rank that stopped is named while the others wait; the first failure is blamed
with its traceback, not the lowest-numbered rank; every rank is ended (SIGKILL for one that ignores SIGTERM
or is stopped); no earlier run's results survive a failed one; a manifest that does not fit its rank files,
or a rank program changed after it was emitted, is refused before any rank starts.

Faults are injected into a 2-rank data-parallel GPT's programs (then restamped: programs.restamp). Runs that
would hang under a broken launcher go through the CLI in a subprocess with a generous bound, so a hang fails
the test instead of stalling the suite."""

import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, emit_shrunk, loom_runner

from loom.runtime import programs
from loom.runtime.launch import LaunchError, train

HANG_BOUND_S = 120  # far above any run here; reached only if the launcher hangs


@pytest.fixture(scope="module")
def emitted(tmp_path_factory, loom_binary):
    root = tmp_path_factory.mktemp("failures")
    return emit_shrunk(loom_runner(loom_binary), root, "gpt3-125m", ["--policy", "dp", "--dp", "2", "--gpus", "2"])


@pytest.fixture()
def program(emitted, tmp_path):
    """A fresh copy of the emitted 2-rank program."""
    return pathlib.Path(shutil.copytree(emitted, tmp_path / "emit"))


def inject(directory, rank, code, at_step=None, before=None):
    """Adds `code` (one line) to rank_<rank>.py at the start of step() (`before`: before the first statement
    containing that text instead), run only at step `at_step` (1-based) when given; restamps the manifest."""
    path = directory / f"rank_{rank}.py"
    lines = path.read_text().splitlines(True)
    if at_step is not None:
        code = f"if rt.step_index + 1 == {at_step}: {code}"
    if before is None:
        where = next(i for i, line in enumerate(lines) if line.startswith("def step(")) + 1
    else:
        where = next(i for i, line in enumerate(lines) if before in line and not line.lstrip().startswith("#"))
    lines.insert(where, f"    {code}\n")
    path.write_text("".join(lines))
    programs.restamp(directory)


def run_cli(directory, *args):
    return subprocess.run([sys.executable, "-m", "loom.runtime.launch", str(directory), *args], capture_output=True,
                          text=True, timeout=HANG_BOUND_S, cwd=ROOT / "python")


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has ended
    except FileNotFoundError:
        return True


def test_a_run_longer_than_the_timeout_finishes(program):
    # --timeout was a deadline for the whole run (timeout + 30 s): this healthy 36 s run was killed as a hang.
    inject(program, 1, "__import__('time').sleep(0.6)")  # rank 0 waits 0.6 s a step for it: under the timeout
    losses, values = train(program, 60, timeout=3)
    assert len(losses) == 60 and all(loss is not None for loss in losses)
    assert "loss" in values


def test_a_sleeping_rank_is_named_where_it_stopped(program):
    # A rank that stops (a sleep) while the other waits in a collective: named with its step and line, the
    # waiting rank named as waiting; formerly every rank was blamed at the whole-run deadline.
    inject(program, 1, "__import__('time').sleep(3600)", at_step=2, before="rt.all_reduce_start(")
    result = run_cli(program, "--steps", "3", "--timeout", "3")
    assert result.returncode == 1
    assert re.search(r"rank 1 stopped at step 2, rank_1.py line \d+ \(`if rt.step_index \+ 1 == 2: "
                     r"__import__\('time'\).sleep\(3600\)`\), after instruction \d+", result.stderr), result.stderr
    assert re.search(r"rank 0 waited \(collective timeout 3 s\)\n  rank 0 waited at step 2, instruction \d+ "
                     r"\(the sums of #", result.stderr), result.stderr


def test_a_stopped_rank_is_named_and_killed(program):
    # A SIGSTOPped rank ignores SIGTERM: the launcher used to hang in multiprocessing's exit join.
    pid_file = program / "rank_1.pid"
    inject(program, 1, f"open({str(pid_file)!r}, 'w').write(str(__import__('os').getpid())); "
                       f"__import__('os').kill(__import__('os').getpid(), __import__('signal').SIGSTOP)", at_step=2)
    result = run_cli(program, "--steps", "3", "--timeout", "3")
    assert result.returncode == 1
    assert "rank 1 is stopped (SIGSTOP) at step 2" in result.stderr, result.stderr
    assert gone(int(pid_file.read_text()))


def test_a_rank_ignoring_sigterm_is_killed(program):
    pid_file = program / "rank_1.pid"
    inject(program, 0, "raise ValueError('rank zero fails')")
    inject(program, 1, f"open({str(pid_file)!r}, 'w').write(str(__import__('os').getpid())); "
                       f"__import__('signal').signal(__import__('signal').SIGTERM, __import__('signal').SIG_IGN); "
                       f"__import__('time').sleep(3600)")
    result = run_cli(program, "--steps", "1", "--timeout", "30")
    assert result.returncode == 1
    assert "rank 0 failed: ValueError: rank zero fails" in result.stderr, result.stderr
    assert gone(int(pid_file.read_text()))


def test_the_first_failure_is_blamed_with_its_traceback(program):
    # Rank 1 fails on its own; its closed connections fail rank 0 first (waiting in a collective). The launcher
    # used to blame the lowest-numbered failed rank: rank 0, "Connection closed by peer".
    inject(program, 1, "__import__('torch.distributed').distributed.destroy_process_group(); "
                       "__import__('time').sleep(0.3); raise ValueError('boom in rank one')", at_step=1)
    with pytest.raises(LaunchError) as failure:
        train(program, 1, timeout=30)
    message = str(failure.value)
    assert message.startswith("rank 1 failed: ValueError: boom in rank one\n  at step 1, rank_1.py line 7"), message
    assert "then rank 0 failed (waiting for it)" in message
    assert re.search(r'File ".*rank_1.py", line 7, in step', message), "the rank's traceback"


def test_a_failed_run_leaves_no_results_of_an_earlier_run(program):
    out = program / "out"
    train(program, 1, out=out, timeout=30)
    assert (out / "values.pt").is_file() and (out / "losses.pt").is_file()
    inject(program, 1, "raise ValueError('broken now')")
    with pytest.raises(LaunchError, match="rank 1 failed: ValueError: broken now"):
        train(program, 1, out=out, timeout=30)
    assert not (out / "values.pt").exists() and not (out / "losses.pt").exists()
    assert not list(out.glob("rank_0.pt")), "no rank's results of the earlier run"


def test_a_manifest_that_does_not_fit_its_ranks_is_refused(program):
    manifest = json.loads((program / "manifest.json").read_text())
    for change, error in [({"world_size": 0}, "world_size 0: a program has at least one rank"),
                          ({"world_size": 3}, "2 entries in 'ranks' for world_size 3"),
                          ({"world_size": True}, "world_size True"),
                          ({"format": 1}, "manifest format 1 is not 2"),
                          ({"groups": [[0, 2]]}, "'groups' must list groups of ranks 0..1")]:
        (program / "manifest.json").write_text(json.dumps({**manifest, **change}))
        with pytest.raises(LaunchError, match=re.escape(error)):
            train(program, 1, timeout=30)
    assert not (program / "results" / "rank_0.error").exists(), "no rank started"


def test_a_truncated_or_foreign_rank_program_is_refused(program, tmp_path, loom_binary):
    # Cut at a line boundary, the program is still valid Python: it ran fewer collectives and hung its peer.
    path = program / "rank_1.py"
    text = path.read_text()
    path.write_text("".join(text.splitlines(True)[:-40]))
    with pytest.raises(LaunchError, match=r"rank_1.py is not the program manifest.json was emitted with .*"
                                          r"edited, truncated or written by another plan"):
        train(program, 1, timeout=30)
    # Another plan's file under the same name (two emits into one directory): refused as well.
    other = emit_shrunk(loom_runner(loom_binary), tmp_path / "other", "gpt3-125m",
                        ["--policy", "dp", "--dp", "2", "--gpus", "2", "--microbatches", "2"])
    path.write_text((other / "rank_1.py").read_text())
    with pytest.raises(LaunchError, match="rank_1.py is not the program"):
        train(program, 1, timeout=30)
    path.write_text(text)
    assert train(program, 1, timeout=30)[0][0] is not None


def test_a_nonpositive_timeout_is_refused(program):
    for timeout in (0, -1, float("inf"), float("nan")):
        with pytest.raises(LaunchError, match="--timeout"):
            train(program, 1, timeout=timeout)


def test_a_backend_that_cannot_run_on_the_device_is_refused(program):
    with pytest.raises(LaunchError, match="--backend nccl needs --device cuda"):
        train(program, 1, timeout=30, backend="nccl")
    with pytest.raises(LaunchError, match="--backend mpi: gloo or nccl"):
        train(program, 1, timeout=30, backend="mpi")


def test_gloo_named_as_the_backend_trains_as_the_default(program, tmp_path):
    default, _ = train(program, 2, timeout=30, out=tmp_path / "default")
    named, _ = train(program, 2, timeout=30, out=tmp_path / "named", backend="gloo")
    assert named == default


def test_program_lines_name_their_instructions(emitted):
    text = (emitted / "rank_0.py").read_text().splitlines()
    header = int(re.search(r"# (\d+) instructions", text[2])[1])
    _, numbered = programs._statements(str(emitted / "rank_0.py"))
    assert len(numbered) == header, "every instruction's statement, and only those, is numbered"
    first = next(n for n, line in enumerate(text, start=1) if "= rt.load(" in line)
    assert programs.where(emitted, 0, first).startswith("instruction 0 (load parameter ")
