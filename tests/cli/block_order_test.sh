#!/usr/bin/env bash
# `--block-order` (plan/schedule.h BlockOrder): strict, the default, runs each pipeline block after the whole
# block before it (Megatron-LM's program); hoist ties only a block's first sub-op, so a T5 decoder stage may
# compute the next micro-batch's cross-attention keys and values inside the running forward. Both verify
# exactly on shrunk T5 under 1F1B; the plan names a hoisted order; bad values and policies that order their
# own blocks are errors that name the cause.
source "$(dirname "$0")/cli_lib.sh"

t5=(--model t5-3.9b --policy megatron --tp 2 --pp 2 --layers 4 --microbatches 4 --gpus 4)
expect strict-verify 0 "$LOOM" verify "${t5[@]}" && contains strict-pass "result     PASS"
if grep -qF "block order" <<<"$out"; then fail "strict-quiet: the default order is named"; else pass=$((pass+1)); fi
expect strict-named 0 "$LOOM" verify "${t5[@]}" --block-order strict && contains strict-named-pass "result     PASS"
expect hoist-verify 0 "$LOOM" verify "${t5[@]}" --block-order hoist &&
  contains hoist-pass "result     PASS" && contains hoist-line "hoist block order"
expect hoist-json 0 "$LOOM" plan "${t5[@]}" --block-order hoist --json --out "$tmp/hoist" &&
  contains hoist-json-resolved '"block_order": "hoist"'
expect help 0 "$LOOM" plan --help && contains help-flag "--block-order" && contains help-values "strict"

expect bad-value nonzero "$LOOM" plan "${t5[@]}" --block-order loose --out "$tmp/bad" &&
  contains bad-value-msg "unknown block order 'loose'" && contains bad-value-fix "use strict"
expect interlaced-hoist nonzero "$LOOM" plan --model t5-3.9b --policy interlaced --pp 2 --tp 2 --layers 4 \
  --microbatches 4 --gpus 4 --block-order hoist --out "$tmp/interlaced" &&
  contains interlaced-hoist-msg "does not combine with the hoist block order"
expect oases-hoist nonzero "$LOOM" plan "${t5[@]}" --overlap oases --block-order hoist --out "$tmp/oases" &&
  contains oases-hoist-msg "drop --block-order"
finish
