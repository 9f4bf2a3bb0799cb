#!/usr/bin/env bash
# `--constraints FILE` (docs/constraints.md): auto, megatron-best and compare plan within the file; an
# explicit policy that breaks it is refused naming the entry; malformed and infeasible files are errors
# naming the file and the entries (both, for a conflict), with no output written; determinism.
source "$(dirname "$0")/cli_lib.sh"

small=(--model gpt3-125m --layers 4 --seq 256 --global-batch 16 --gpus 4)
c=$tmp/c.yaml

cat >"$c" <<'EOF'
degrees: {tp: [2]}
replicate: [layers.*.ln1]
EOF
expect tp2 0 "$LOOM" plan "${small[@]}" --policy auto --constraints "$c" --out "$tmp/a" &&
  contains tp2-policy "policy     auto -> megatron: dp 2 x tp 2" &&
  contains tp2-space "search     auto: 90 of 201 configurations within $c, "
expect tp2-again 0 "$LOOM" plan "${small[@]}" --policy auto --constraints "$c" --out "$tmp/b"
for f in plan.json exec.json; do
  if cmp -s "$tmp/a/$f" "$tmp/b/$f"; then pass=$((pass+1)); else fail "tp2-deterministic-$f: files differ"; fi
done
expect tp2-megatron-best 0 "$LOOM" plan "${small[@]}" --policy megatron-best --constraints "$c" --out "$tmp/m" &&
  contains tp2-megatron-best-policy "megatron-best -> megatron: dp 2 x tp 2"
# An explicit policy within the file plans; one outside it is refused, naming the entry; nothing written.
expect explicit-ok 0 "$LOOM" plan "${small[@]}" --policy megatron --tp 2 --constraints "$c" --out "$tmp/e"
expect explicit-refused 1 "$LOOM" plan "${small[@]}" --policy megatron --tp 4 --constraints "$c" --out "$tmp/r" &&
  contains explicit-refused-entry "entry 'degrees.tp' (line 1): tp 4 is not in [2]" &&
  contains explicit-refused-hint "hint: "
[ -e "$tmp/r" ] && fail "explicit-refused wrote $tmp/r" || pass=$((pass+1))
# compare: the refused policy is an n/a row, auto and megatron-best plan within the file.
expect compare 0 "$LOOM" compare "${small[@]}" --policies auto,megatron-best,tp --constraints "$c" &&
  contains compare-auto "auto -> megatron: dp 2 x tp 2" && contains compare-na "n/a: policy tp: dp 1 x tp 4"

# A placement pins the stages (JSON accepted).
cat >"$tmp/p.json" <<'EOF'
{"placement": {"stages": 2, "layers.0-1": "stage 0", "layers.2-3": "stage 1"}}
EOF
expect placement 0 "$LOOM" plan "${small[@]}" --policy auto --constraints "$tmp/p.json" --out "$tmp/p" &&
  contains placement-pp "x pp 2"

# Infeasible: each names both sides, exits 1, writes nothing.
infeasible() {  # infeasible NAME TEXT EXPECTED...
  local name=$1 text=$2; shift 2
  printf '%s\n' "$text" >"$tmp/$name.yaml"
  expect "$name" 1 "$LOOM" plan "${small[@]}" --policy auto --constraints "$tmp/$name.yaml" --out "$tmp/$name" || return
  for want in "$@"; do contains "$name-msg" "$want"; done
  [ -e "$tmp/$name" ] && fail "$name wrote $tmp/$name" || pass=$((pass+1))
}
infeasible tp3 'degrees: {tp: [3]}' "entry 'degrees.tp' (line 1) conflicts with the job's 4 GPUs" "no tp in [3] divides 4"
infeasible stages $'placement:\n  stages: 2\n  layers.0: stage 3' "entries 'placement.layers.0' (line 3) and 'placement.stages' (line 2) conflict"
infeasible split-replicated $'replicate: [layers.*.mlp]\npartition:\n  - ops: layers.*.mlp.fc1\n    dims: [o]' \
  "entries 'partition[0]' (line 3) and 'replicate[0]' (line 1) conflict"
infeasible pair $'schedule: {micro_batches: [1]}\ndegrees: {pp: [2]}' \
  "entries 'schedule.micro_batches' (line 1) and 'degrees.pp' (line 2) conflict"
infeasible uneven 'placement: {layers.0: stage 1}' "entry 'placement.layers.0' (line 1) admits none of the"

# Malformed files: the file, the entry, the fix.
infeasible unknown-key 'degrees: {tq: [2]}' "constraints file '$tmp/unknown-key.yaml': entry 'degrees.tq' (line 1) is an unknown key" "the keys of 'degrees' are dp, tp"
infeasible duplicate $'degrees:\n  tp: 2\n  tp: 4' "entry 'degrees.tp' (line 3) is given twice"
infeasible no-match 'replicate: [layers.*.mlpp]' "'layers.*.mlpp' matches no forward op" "loom graph --text"
infeasible bad-value 'degrees: {recompute: [sometimes]}' "has 'sometimes'"
# The Oases planner and per-layer degrees are refused with a file (not yet checked), naming why.
expect oases-refused 1 "$LOOM" plan "${small[@]}" --policy oases --constraints "$c" &&
  contains oases-refused-msg "does not take a constraint file yet"
expect missing-file 1 "$LOOM" plan "${small[@]}" --policy auto --constraints "$tmp/none.yaml" &&
  contains missing-file-msg "$tmp/none.yaml: cannot read the constraints file"
# A FIFO would block forever: refused as every file input is (core/input_file.h).
mkfifo "$tmp/fifo.yaml"
expect fifo-file 1 "$LOOM" plan "${small[@]}" --policy auto --constraints "$tmp/fifo.yaml" &&
  contains fifo-file-msg "$tmp/fifo.yaml: cannot read the constraints file"
finish
