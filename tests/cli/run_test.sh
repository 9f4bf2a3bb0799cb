#!/usr/bin/env bash
# `loom run [options] script.py [args...]`: torchrun of a user's script with python/ (and the build's
# extension dir) on PYTHONPATH; the script's arguments pass through; torchrun's multi-node options pass on
# (checked first: a rendezvous for several nodes, a static one's node rank); a failing rank fails the run;
# bad input.
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

# One node: --standalone (its own rendezvous), as without the option.
expect one-node 0 "$LOOM" run --dry-run --nnodes 1 --nproc 2 "$tmp/hi.py" a
contains one-node-command "-m torch.distributed.run --standalone --nnodes 1 --nproc-per-node 2 $tmp/hi.py a"
# Several nodes, a static rendezvous: every option under torchrun's name, no --standalone; --opt=value too.
expect static 0 "$LOOM" run --dry-run --nnodes 2 --node-rank 1 --master-addr node0 --master-port=29501 \
  --max-restarts 3 --nproc 4 "$tmp/hi.py" --lr 1
contains static-command "-m torch.distributed.run --nnodes 2 --nproc-per-node 4 --node-rank 1 --master-addr node0 --master-port 29501 --max-restarts 3 $tmp/hi.py --lr 1"
# A dynamic (c10d) rendezvous numbers the nodes itself, elastic ranges allowed.
expect dynamic 0 "$LOOM" run --dry-run --nnodes 1:4 --rdzv-backend c10d --rdzv-endpoint node0:29400 --rdzv-id job7 \
  "$tmp/hi.py"
contains dynamic-command "-m torch.distributed.run --nnodes 1:4 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint node0:29400 --rdzv-id job7 $tmp/hi.py"
expect one-node-port 0 "$LOOM" run --dry-run --master-port 29411 "$tmp/hi.py"
contains one-node-port-command "-m torch.distributed.run --nproc-per-node 1 --master-port 29411 $tmp/hi.py"

# Unknown options before the script (once read as the script) and launches that would hang every node.
expect unknown-option nonzero "$LOOM" run --nnode 2 "$tmp/hi.py"
contains unknown-option-message "loom: error: unknown option '--nnode' for \`loom run\` (before the script)"
contains unknown-option-hint "hint: did you mean --nnodes?"
expect underscored-option nonzero "$LOOM" run --node_rank=1 "$tmp/hi.py"
contains underscored-option-hint "did you mean --node-rank?"
expect torchrun-spelling nonzero "$LOOM" run --nproc-per-node 4 "$tmp/hi.py"
contains torchrun-spelling-hint "did you mean --nproc?"
expect no-rendezvous nonzero "$LOOM" run --nnodes 2 "$tmp/hi.py"
contains no-rendezvous-message "a run on 2 nodes needs a rendezvous"
expect no-node-rank nonzero "$LOOM" run --nnodes 2 --master-addr node0 "$tmp/hi.py"
contains no-node-rank-message "a static rendezvous on 2 nodes needs each node's --node-rank"
expect node-rank-range nonzero "$LOOM" run --nnodes 2 --master-addr node0 --node-rank 2 "$tmp/hi.py"
contains node-rank-range-message "--node-rank 2 is not below --nnodes 2"
expect standalone-nodes nonzero "$LOOM" run --standalone --nnodes 2 --rdzv-backend c10d --rdzv-endpoint n:1 "$tmp/hi.py"
contains standalone-nodes-message "--standalone runs on one node, but --nnodes is 2"
expect elastic-static nonzero "$LOOM" run --nnodes 1:4 --master-addr node0 --node-rank 0 "$tmp/hi.py"
contains elastic-static-message "--nnodes 1:4 (an elastic range) needs a dynamic rendezvous"
expect backend-without-endpoint nonzero "$LOOM" run --rdzv-backend c10d "$tmp/hi.py"
contains backend-without-endpoint-message "--rdzv-backend c10d needs --rdzv-endpoint HOST:PORT"
expect bad-port nonzero "$LOOM" run --master-port 70000 "$tmp/hi.py"
contains bad-port-message "--master-port: '70000' is not a port from 1 to 65535"

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

# Two nodes on this machine (a static rendezvous on a free port): torchrun takes the options as loom passes
# them, and the two runs form one world of 2, node ranks 0 and 1.
cat > "$tmp/nodes.py" <<'PY'
import os
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} on node {os.environ['GROUP_RANK']}", flush=True)
PY
port=$("$py" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
"$LOOM" run --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port "$port" "$tmp/nodes.py" > "$tmp/node1.log" 2>&1 &
node1=$!
expect two-nodes 0 "$LOOM" run --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port "$port" "$tmp/nodes.py"
contains node-0 "rank 0 of 2 on node 0"
wait_rc=0; wait "$node1" || wait_rc=$?
out=$(cat "$tmp/node1.log")
if [ "$wait_rc" = 0 ]; then pass=$((pass+1)); else fail "node-1: exit $wait_rc, want 0"; fi
contains node-1 "rank 1 of 2 on node 1"
finish
