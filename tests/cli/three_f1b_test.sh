#!/usr/bin/env bash
# `loom verify` with nnScaler's 3F1B pipeline (--schedule 3f1b: AlphaFold2's recycled passes pipelined by
# layer, Table 7's order) on the shrunk alphafold2-87m (2 passes: 1 recycle + the one with a backward),
# pp 2 and 4, tp 1 and 2, dp 1 and 2; the simulator against the passes staged in program order; bad inputs.
source "$(dirname "$0")/cli_lib.sh"

for layout in "2 1 1" "2 2 1" "2 1 2" "2 2 2" "4 1 1" "4 2 1"; do
  read -r pp tp dp <<<"$layout"
  name="3f1b-pp$pp-tp$tp-dp$dp"
  expect "$name" 0 "$LOOM" verify --model alphafold2-87m --policy megatron --schedule 3f1b --pp "$pp" --tp "$tp" \
    --dp "$dp" --layers "$pp" --microbatches 4 --global-batch $((4 * dp)) &&
    contains "$name-pass" "result     PASS" && contains "$name-line" "dp $dp x tp $tp x pp $pp, 4 micro-batches (3f1b)"
done

# Full-size Evoformer blocks (4 of them, 4 passes), pp 4 on one DGX-2: staged by layer within each pass,
# 3F1B's step is shorter than 1F1B over the program-order stages (a whole pass per stage).
step_s() { "$LOOM" plan --model alphafold2-87m --layers 4 --policy megatron --pp 4 --microbatches 8 --global-batch 8 \
  --gpus 4 --cluster dgx2 --schedule "$1" --json --out "$tmp/af-$1" 2>/dev/null |
  sed -n 's/.*"step_time_s": \([0-9.e+-]*\).*/\1/p' | head -1; }
three=$(step_s 3f1b) one=$(step_s 1f1b)
if [ -n "$three" ] && [ -n "$one" ] && awk -v a="$three" -v b="$one" 'BEGIN { exit !(a < b) }'; then pass=$((pass+1))
else out="3f1b $three s, 1f1b $one s"; fail "3f1b-shorter-step"; fi

# Bad inputs.
expect 3f1b-one-pass nonzero "$LOOM" verify --model gpt3-125m --policy megatron --pp 2 --layers 2 --schedule 3f1b &&
  contains 3f1b-one-pass-msg "runs each layer once"
expect 3f1b-pp1 nonzero "$LOOM" verify --model alphafold2-87m --policy megatron --schedule 3f1b &&
  contains 3f1b-pp1-msg "but pp is 1"
expect 3f1b-interleave nonzero "$LOOM" verify --model alphafold2-87m --policy megatron --pp 2 --layers 2 \
  --interleave 2 --schedule 3f1b && contains 3f1b-interleave-msg "--interleave 2 was given"
expect 3f1b-layers nonzero "$LOOM" verify --model alphafold2-87m --policy megatron --pp 2 --schedule 3f1b &&
  contains 3f1b-layers-msg "set --layers"
expect 3f1b-fold nonzero "$LOOM" plan --model alphafold2-87m --policy megatron --pp 2 --layers 2 --schedule 3f1b \
  --fold on && contains 3f1b-fold-msg "fold"

finish
