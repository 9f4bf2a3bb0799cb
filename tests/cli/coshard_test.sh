#!/usr/bin/env bash
# Coshard (policy/coshard.h; --coshard C, --coshard-layers A:B, --coshard-ops, --policy coshard): `loom verify`
# proves it on shrunk Swin, GPT and LLaMA combined with tp 2, with pp 2 and with dp and ZeRO; `loom plan`
# names it; bad inputs fail with the fix.
source "$(dirname "$0")/cli_lib.sh"

coshard_line="coshard 2 parts per tp rank on layers 0: (attention,mlp)"
for model in swin-1.8b gpt3-125m llama3-8b; do
  # With tp 2: 2 parts per tp rank, the tp all-reduces as many as Megatron's (each device sums its parts first).
  expect "tp-$model" 0 "$LOOM" verify --model "$model" --policy megatron --tp 2 --coshard 2 &&
    contains "tp-$model-pass" "result     PASS" && contains "tp-$model-line" "$coshard_line"
  plain_reduces=$("$LOOM" verify --model "$model" --policy megatron --tp 2 | grep -o 'all-reduce [0-9]*;')
  contains "tp-$model-one-all-reduce-per-region" "$plain_reduces"
  # With a 2-stage pipeline (1F1B over 2 micro-batches).
  expect "pp-$model" 0 "$LOOM" verify --model "$model" --policy megatron --pp 2 --microbatches 2 --coshard 2 &&
    contains "pp-$model-pass" "result     PASS" && contains "pp-$model-line" "$coshard_line" &&
    contains "pp-$model-schedule" "2 micro-batches (1f1b)"
done

# tp and pp together, an attention-only range of layers, dp with ZeRO, and the policy's defaults (nnScaler's Swin
# on one GPU: 4 parts on the first quarter of the layers).
expect tp-pp-llama 0 "$LOOM" verify --model llama3-8b --policy megatron --tp 2 --pp 2 --microbatches 2 --layers 4 \
  --coshard 2 --coshard-layers 1:3 --coshard-ops attention &&
  contains tp-pp-llama-pass "result     PASS" &&
  contains tp-pp-llama-line "coshard 2 parts per tp rank on layers 1:3 (attention): 2 regions"
expect dp-zero-gpt 0 "$LOOM" verify --model gpt3-125m --policy megatron --dp 2 --tp 2 --zero 1 --coshard 2 &&
  contains dp-zero-gpt-pass "result     PASS"
expect policy-swin 0 "$LOOM" verify --model swin-1.8b --policy coshard --devices 1 &&
  contains policy-swin-pass "result     PASS" &&
  contains policy-swin-line "coshard 4 parts per tp rank on layers 0:1 (attention,mlp): 2 regions"
expect plan-line 0 "$LOOM" plan --model swin-1.8b --shrink --policy megatron --tp 2 --coshard 2 --gpus 2 \
  --out "$tmp/plan" && contains plan-line-policy "coshard 2 on layers all (attention,mlp)"

# Bad inputs.
expect not-dividing 1 "$LOOM" verify --model gpt3-125m --policy megatron --tp 2 --coshard 4 &&
  contains not-dividing-msg "op 'layers.0.attn.qkv.view' (reshape) is split along 'c', which has 4 elements" &&
  contains not-dividing-size "tp x coshard = 8 does not divide 4"
expect outside 1 "$LOOM" verify --model gpt3-125m --policy megatron --coshard 2 --coshard-layers 1:5 &&
  contains outside-msg "coshard layers 1:5: 'gpt3-125m' has 2 layers"
expect no-regions 1 "$LOOM" verify --model resnet-50 --policy coshard &&
  contains no-regions-msg "has no tensor-parallel"
expect layers-without-parts 1 "$LOOM" verify --model gpt3-125m --policy megatron --coshard-layers 0:1 &&
  contains layers-without-parts-msg "coshard is off"
expect other-policy 1 "$LOOM" verify --model gpt3-125m --policy dp --coshard 2 &&
  contains other-policy-msg "policy 'dp' does not use coshard"
expect bad-range 2 "$LOOM" verify --model gpt3-125m --coshard 2 --coshard-layers 3:1 &&
  contains bad-range-msg "layer range '3:1' is empty"
expect bad-ops 2 "$LOOM" verify --model gpt3-125m --coshard 2 --coshard-ops conv &&
  contains bad-ops-msg "unknown coshard op class 'conv'"
expect zero-parts 2 "$LOOM" verify --model gpt3-125m --coshard 0

finish
