#!/usr/bin/env bash
# Per-layer tensor-parallel degrees (--tp-layers, policy/layer_degrees.h): shrunk GPT, BERT and LLaMA with
# layers at different degrees inside one tp group (the lower ones as data-parallel copies, the activations
# moved between them by the layout search) verify exactly as one device, with Oases' overlap, recomputation,
# dp, micro-batches and a pipeline; the Oases planner (--policy oases, --tp-layers auto) prints its choice and
# plans it; bad specs are errors naming the spec.
source "$(dirname "$0")/cli_lib.sh"

for args in "--model gpt3-125m --tp 4 --tp-layers 2x1,4x1" \
  "--model gpt3-125m --tp 4 --tp-layers 2x1,4x1 --overlap oases" \
  "--model gpt3-125m --tp 4 --tp-layers 1x1,4x1 --overlap oases --recompute full --batch 8" \
  "--model gpt3-125m --tp 2 --pp 2 --tp-layers 1x1,2x1 --microbatches 2 --batch 8" \
  "--model bert-1.3b --tp 4 --tp-layers 2x1,4x1 --overlap oases" \
  "--model bert-1.3b --tp 4 --tp-layers 4x1,1x1 --overlap oases --recompute full --batch 8" \
  "--model llama3-8b --tp 2 --tp-layers 1x1,2x1 --overlap oases" \
  "--model llama3-8b --dp 2 --tp 2 --tp-layers 2x1,1x1 --batch 8 --overlap oases"; do
  name="tp-layers${args// /}"
  # shellcheck disable=SC2086
  expect "$name" 0 "$LOOM" verify --policy megatron $args && contains "$name-pass" "result     PASS"
done

# The planner on a shrunk GPT: its line, the choice in the policy, deterministic files.
expect planner 0 "$LOOM" plan --model gpt3-125m --shrink --tp 4 --gpus 4 --policy oases --explain --out "$tmp/p1" &&
  contains planner-search "search     oases planner:" && contains planner-why "solved exactly in" &&
  contains planner-policy "oases overlap, tp layers" && contains planner-chosen "(oases planner)"
expect planner-again 0 "$LOOM" plan --model gpt3-125m --shrink --tp 4 --gpus 4 --tp-layers auto --overlap oases \
  --out "$tmp/p2"
cmp -s "$tmp/p1/plan.json" "$tmp/p2/plan.json" && pass=$((pass+1)) || fail "planner: plan.json differs between runs"

# Errors name the spec and the fix.
expect bad-form nonzero "$LOOM" plan --model gpt3-125m --shrink --tp 4 --gpus 4 --tp-layers 2-1,4x1 --out "$tmp/e" &&
  contains bad-form-msg "the run '2-1' is not DEGREExLAYERS" && contains bad-form-hint "2x8,4x16"
expect bad-count nonzero "$LOOM" plan --model gpt3-125m --shrink --tp 4 --gpus 4 --tp-layers 2x1,4x2 --out "$tmp/e" &&
  contains bad-count-msg "the runs cover 3 layers, but the model has 2"
expect bad-degree nonzero "$LOOM" plan --model gpt3-125m --shrink --tp 4 --gpus 4 --tp-layers 3x1,4x1 --out "$tmp/e" &&
  contains bad-degree-msg "layer 0 has degree 3, which does not divide the tp group 4"
expect bad-policy nonzero "$LOOM" plan --model gpt3-125m --shrink --gpus 4 --policy dp --tp-layers 1x2 --out "$tmp/e" &&
  contains bad-policy-msg "per-layer degrees of the policy megatron, not dp"
expect bad-pipeline nonzero "$LOOM" plan --model gpt3-125m --shrink --tp 2 --pp 2 --gpus 4 --tp-layers auto \
  --out "$tmp/e" && contains bad-pipeline-msg "the Oases planner prices one pipeline stage, but pp is 2"
expect bad-search nonzero "$LOOM" plan --model gpt3-125m --shrink --gpus 4 --policy auto --tp-layers auto \
  --out "$tmp/e" && contains bad-search-msg "runs the Oases planner on the policy megatron, not auto"
[ ! -e "$tmp/e" ] && pass=$((pass+1)) || fail "a refused plan wrote files"
finish
