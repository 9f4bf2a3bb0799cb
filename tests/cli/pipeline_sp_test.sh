#!/usr/bin/env bash
# `loom verify` with interleaved 1F1B (--interleave V: V model chunks of whole layers per pipeline device)
# and sequence parallelism (--sp), on shrunk presets, and their bad inputs.
source "$(dirname "$0")/cli_lib.sh"

# Interleaved 1F1B: pp x V chunks need pp x V dividing the layers (the shrunk presets have 2; --layers 4).
expect interleave-gpt 0 "$LOOM" verify --model gpt3-125m --policy pp --pp 2 --interleave 2 --layers 4 &&
  contains interleave-gpt-pass "result     PASS" && contains interleave-gpt-schedule "(interleaved 1f1b, 2 chunks per device)"
expect interleave-llama 0 "$LOOM" verify --model llama3-8b --policy pp --pp 2 --interleave 2 --layers 4 --microbatches 2 &&
  contains interleave-llama-pass "result     PASS"
expect interleave-three-chunks 0 "$LOOM" verify --model gpt3-125m --policy pp --pp 2 --interleave 3 --layers 6 &&
  contains interleave-three-chunks-pass "result     PASS"
expect interleave-megatron-sp 0 "$LOOM" verify --model llama3-8b --policy megatron --dp 2 --tp 2 --pp 2 --interleave 2 \
  --layers 4 --microbatches 2 --sp &&
  contains interleave-megatron-sp-pass "result     PASS" && contains interleave-megatron-sp-devices "on 8 devices"

# Sequence parallelism: the all-reduces of tensor parallelism become reduce-scatters and all-gathers.
for model in gpt3-125m llama3-8b; do
  expect "sp-tp-$model" 0 "$LOOM" verify --model "$model" --policy tp --devices 2 --sp &&
    contains "sp-tp-$model-pass" "result     PASS" && contains "sp-tp-$model-rs" "reduce-scatter" &&
    contains "sp-tp-$model-line" "sequence parallel over the tp ranks"
  expect "sp-dp-tp-$model" 0 "$LOOM" verify --model "$model" --policy dp-tp --devices 4 --sp &&
    contains "sp-dp-tp-$model-pass" "result     PASS"
done

# Bad inputs.
expect interleave-bad-microbatches nonzero "$LOOM" verify --model gpt3-125m --policy pp --pp 2 --interleave 2 --layers 4 \
  --microbatches 3 && contains interleave-bad-microbatches-msg "3 micro-batches are not a multiple of pp 2"
expect interleave-bad-layers nonzero "$LOOM" verify --model gpt3-125m --policy pp --pp 2 --interleave 2 &&
  contains interleave-bad-layers-msg "2 layers of 'gpt3-125m' are not divisible into 4 stages of whole layers"
expect interleave-gpipe nonzero "$LOOM" verify --model gpt3-125m --policy pp --pp 2 --interleave 2 --layers 4 --schedule gpipe &&
  contains interleave-gpipe-msg "not GPipe"
expect interleave-no-pipeline nonzero "$LOOM" verify --model gpt3-125m --policy megatron --dp 2 --interleave 2 &&
  contains interleave-no-pipeline-msg "need a pipeline, but pp is 1"
expect interleave-zero nonzero "$LOOM" verify --model gpt3-125m --policy pp --interleave 0
expect sp-without-tp nonzero "$LOOM" verify --model gpt3-125m --policy megatron --dp 2 --sp &&
  contains sp-without-tp-msg "sequence parallelism needs tensor parallelism"
expect sp-dp-policy nonzero "$LOOM" verify --model gpt3-125m --policy dp --devices 2 --sp &&
  contains sp-dp-policy-msg "does not use tensor parallelism"
expect sp-images nonzero "$LOOM" verify --model swin-1.8b --policy tp --devices 2 --sp &&
  contains sp-images-msg "carries a sequence"

finish
