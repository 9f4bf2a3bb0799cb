#!/usr/bin/env bash
# `loom run script.py --nproc N [args...]`: torchrun of a user's script with python/ (and the build's
# extension dir) on PYTHONPATH; the script's arguments pass through; a failing rank fails the run; bad input.
# The torchrun part needs the repository's .venv (torch): without it those checks are skipped, and say so.
source "$(dirname "$0")/cli_lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
py="$root/.venv/bin/python"

# Bad input, before any Python runs.
expect missing-script nonzero "$LOOM" run "$tmp/nope.py" --nproc 2
contains missing-script-message "the script '$tmp/nope.py' does not exist"
echo 'print("hi")' > "$tmp/hi.py"
expect bad-python nonzero "$LOOM" run "$tmp/hi.py" --python "$tmp/no-python"
contains bad-python-message "--python names the Python '$tmp/no-python', which is not an executable"
expect bad-env-python nonzero env LOOM_PYTHON=no-such-python-here "$LOOM" run "$tmp/hi.py"
contains bad-env-python-message "\$LOOM_PYTHON names the Python 'no-such-python-here'"
expect bad-nproc nonzero "$LOOM" run "$tmp/hi.py" --nproc 0
contains bad-nproc-message "--nproc: '0' is not a process count from 1 to 4096"
expect no-script nonzero "$LOOM" run --nproc 2
contains no-script-message "loom run needs a script"
expect bad-nproc-late nonzero "$LOOM" run "$tmp/hi.py" x --nproc four
contains bad-nproc-late-message "--nproc: 'four' is not a process count"
expect nproc-first 0 "$LOOM" run --nproc=2 --dry-run "$tmp/hi.py" a
contains nproc-first-command "--nproc-per-node 2 $tmp/hi.py a"
expect separator 0 "$LOOM" run "$tmp/hi.py" a --nproc 2 b --dry-run -- --tp 1
contains separator-command "--nproc-per-node 2 $tmp/hi.py a b --tp 1"

# The command it runs: torchrun with the script's own arguments in order (those named like loom run's own
# options after --), PYTHONPATH naming python/ before the caller's.
expect dry-run 0 env PYTHONPATH=/elsewhere "$LOOM" run "$tmp/hi.py" --nproc 3 --steps 5 --python /usr/bin/python3 x \
  --dry-run -- --nproc 7
contains dry-run-torchrun "/usr/bin/python3 -m torch.distributed.run --standalone --nproc-per-node 3 $tmp/hi.py --steps 5 x --nproc 7"
contains dry-run-path "PYTHONPATH=$root/python:"
contains dry-run-caller-path ":/elsewhere "

if [ ! -x "$py" ] || ! "$py" -c "import torch" 2>/dev/null; then
  echo "run_test: torchrun checks skipped: $root/.venv lacks torch (run: make venv)"
  finish; exit
fi

# Two ranks, each finding the loom package on the path it was given and the script's arguments; rank 1
# then fails, which fails the run, torchrun naming the rank and its exit code (one torchrun: it imports torch).
cat > "$tmp/ranks.py" <<'PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("loom")
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} args {sys.argv[1:]} loom {spec.submodule_search_locations[0]}")
sys.exit(3 if os.environ["RANK"] == "1" else 0)
PY
expect failing-rank nonzero "$LOOM" run "$tmp/ranks.py" --nproc 2 --steps 5
contains rank-0 "rank 0 of 2 args ['--steps', '5'] loom $root/python/loom"
contains rank-1 "rank 1 of 2 args ['--steps', '5'] loom $root/python/loom"
contains failing-rank-named "rank      : 1"
contains failing-rank-code "exitcode  : 3"
finish
