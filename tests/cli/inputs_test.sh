#!/usr/bin/env bash
# Input guards (docs/files.md; issue 17 "Inputs"): every file input is read only when it is a regular file
# under a size limit, so /dev/zero and a FIFO are refused at once, naming the input (they aborted with
# bad_alloc or blocked forever). `timeout` turns a hang into a failure here.
source "$(dirname "$0")/cli_lib.sh"

mkfifo "$tmp/fifo"
small=(--layers 2 --seq 256 --global-batch 8 --gpus 4)
for bad in /dev/zero "$tmp/fifo"; do
  kind=$([ "$bad" = /dev/zero ] && echo "a character device" || echo "a FIFO (named pipe)")
  expect "from $bad" nonzero timeout 20 "$LOOM" graph --from "$bad" &&
    contains "from $bad names it" "$bad: cannot read the graph file: it is $kind, not a regular file"
  expect "graph $bad" nonzero timeout 20 "$LOOM" plan --graph "$bad" --gpus 4 --out "$tmp/o" &&
    contains "graph $bad names it" "$bad: cannot read the graph file: it is $kind"
  expect "profile $bad" nonzero timeout 20 "$LOOM" plan --model gpt3-125m "${small[@]}" --profile "$bad" --out "$tmp/o" &&
    contains "profile $bad names it" "$bad: cannot read the profile database: it is $kind"
  expect "db $bad" nonzero timeout 20 "$LOOM" profile --model gpt3-125m "${small[@]}" --db "$bad" --dry-run --device-name cpu &&
    contains "db $bad names it" "$bad: cannot read the profile database: it is $kind"
  expect "model-file $bad" nonzero timeout 20 "$LOOM" plan --model-file "$bad" "${small[@]}" --out "$tmp/o" &&
    contains "model-file $bad names it" "$bad: cannot read the model file: it is $kind"
  expect "cluster $bad" nonzero timeout 20 "$LOOM" plan --model gpt3-125m "${small[@]}" --cluster "$bad" --out "$tmp/o"
  expect "results $bad" nonzero timeout 20 "$LOOM" profile --model gpt3-125m "${small[@]}" --db "$tmp/db.json" \
    --results "$bad" --device-name cpu && contains "results $bad names it" "$bad: cannot read the timer results: it is $kind"
  expect "iopddl $bad" nonzero timeout 20 "$LOOM" solve-iopddl "$bad" &&
    contains "iopddl $bad names it" "$bad: cannot read the IOPDDL instance: it is $kind"
done
# A cluster file path must end in .yaml, .yml or .json, so the guard is reached through a FIFO so named.
mkfifo "$tmp/fifo.yaml"
expect "cluster fifo" nonzero timeout 20 "$LOOM" plan --model gpt3-125m "${small[@]}" --cluster "$tmp/fifo.yaml" --out "$tmp/o" &&
  contains "cluster fifo names it" "$tmp/fifo.yaml: cannot read the cluster file: it is a FIFO (named pipe)"

# Pricing does not depend on the cluster's size: a 4-GPU plan on a valid 65,536-node cluster file (161 s
# before) is the same plan, with the same predictions, as on one node.
"$LOOM" clusters --yaml dgx-a100 > "$tmp/one.yaml"
sed 's/^nodes: 1$/nodes: 65536/' "$tmp/one.yaml" > "$tmp/huge.yaml"
grep -q '^nodes: 65536$' "$tmp/huge.yaml" && pass=$((pass+1)) || fail "huge cluster: the file was not made"
plan4=(plan --model gpt3-125m "${small[@]}" --policy megatron --tp 2 --dp 2 --json)
expect "one node" 0 "$LOOM" "${plan4[@]}" --cluster "$tmp/one.yaml" --out "$tmp/one" && one=$out
expect "65536 nodes" 0 timeout 120 "$LOOM" "${plan4[@]}" --cluster "$tmp/huge.yaml" --out "$tmp/huge" && huge=$out
for f in plan.json exec.json trace.json; do
  cmp -s "$tmp/one/$f" "$tmp/huge/$f" && pass=$((pass+1)) || fail "huge cluster: $f differs from one node's"
done
python3 - "$one" "$huge" <<'PY' && pass=$((pass+1)) || fail "huge cluster: the predictions differ"
import json, sys
one, huge = (json.loads(t) for t in sys.argv[1:])
a, b = one["summary"], huge["summary"]
for key in ("step_time_s", "mfu", "per_device"):
    assert a[key] == b[key], (key, a[key], b[key])
PY

# The explicit plan's memory is estimated before planning and refused with the option that avoids it: under
# --fold off (175B on 1024 GPUs climbed past 13 GB) and for ZeRO-3 on 512 GPUs (18 GB under the sub-op limit).
expect fold-off-175b nonzero timeout 60 "$LOOM" plan --model gpt3-175b --cluster dgx-a100x128 --dp 8 --tp 8 --pp 16 \
  --microbatches 64 --interleave 2 --global-batch 512 --fold off --out "$tmp/o175" &&
  contains fold-off-175b-msg "GiB to plan, over Loom's limit of 14.31 GiB; policy megatron is planned unfolded" &&
  contains fold-off-175b-hint "hint: drop --fold off"
expect zero3-512 nonzero timeout 60 "$LOOM" plan --model gpt3-1.3b --cluster dgx-a100x64 --policy zero --zero 3 --gpus 512 \
  --global-batch 512 --microbatches 1 --out "$tmp/z512" && contains zero3-512-msg "policy zero with ZeRO-3 cannot be folded"
[ -e "$tmp/o175" ] || [ -e "$tmp/z512" ] && fail "refused plans wrote files" || pass=$((pass+1))

finish
