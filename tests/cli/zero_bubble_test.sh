#!/usr/bin/env bash
# `loom verify` with the zero-bubble schedules (--schedule zb-h1 / zb-h2 / zb-v / dualpipe-v: backward ops
# split into their input part B and weight part W, the W's ordered apart) on shrunk GPT and LLaMA, pp 2 and pp 4.
source "$(dirname "$0")/cli_lib.sh"

for schedule in zb-h1 zb-h2 zb-v; do
  for model in gpt3-125m llama3-8b; do
    for pp in 2 4; do
      name="$schedule-$model-pp$pp"
      expect "$name" 0 "$LOOM" verify --model "$model" --policy pp --pp "$pp" --schedule "$schedule" --layers 8 \
        --microbatches 4 --global-batch 8 &&
        contains "$name-pass" "result     PASS" && contains "$name-line" "4 micro-batches ($schedule)"
    done
  done
done
# DualPipeV needs 2 micro-batches per pipeline device.
for model in gpt3-125m llama3-8b; do
  for pp in 2 4; do
    name="dualpipe-v-$model-pp$pp"
    expect "$name" 0 "$LOOM" verify --model "$model" --policy pp --pp "$pp" --schedule dualpipe-v --layers 8 \
      --microbatches $((2 * pp)) --global-batch 8 &&
      contains "$name-pass" "result     PASS" && contains "$name-line" "$((2 * pp)) micro-batches (dualpipe-v)"
  done
done
expect zb-megatron 0 "$LOOM" verify --model llama3-8b --policy megatron --tp 2 --pp 2 --schedule zb-h1 --layers 4 \
  --microbatches 4 --gpus 4 && contains zb-megatron-pass "result     PASS"

# The simulator prices the deferred W's into the cool-down: ZB-H1's step is shorter than 1F1B's.
step_s() { "$LOOM" plan --model gpt3-1.3b --policy pp --pp 4 --microbatches 8 --global-batch 8 --gpus 4 \
  --schedule "$1" --json --out "$tmp/zb-$1" 2>/dev/null | sed -n 's/.*"step_time_s": \([0-9.e+-]*\).*/\1/p'; }
one=$(step_s 1f1b) h1=$(step_s zb-h1)
if [ -n "$one" ] && [ -n "$h1" ] && awk -v a="$h1" -v b="$one" 'BEGIN { exit !(a < b) }'; then pass=$((pass+1))
else out="1f1b $one s, zb-h1 $h1 s"; fail "zb-h1-shorter-step"; fi
dual=$(step_s dualpipe-v)
if [ -n "$dual" ] && awk -v a="$dual" -v b="$one" 'BEGIN { exit !(a < b) }'; then pass=$((pass+1))
else out="1f1b $one s, dualpipe-v $dual s"; fail "dualpipe-v-shorter-step"; fi

# ZB-V's V: device 0 holds the first and the last stage (the embeddings and the head).
expect zb-v-megatron 0 "$LOOM" verify --model llama3-8b --policy megatron --tp 2 --pp 2 --schedule zb-v --layers 4 \
  --microbatches 4 --gpus 4 && contains zb-v-megatron-pass "result     PASS"

expect dualpipe-v-megatron 0 "$LOOM" verify --model llama3-8b --policy megatron --tp 2 --pp 2 --schedule dualpipe-v \
  --layers 4 --microbatches 4 --gpus 4 && contains dualpipe-v-megatron-pass "result     PASS"

# Bad inputs.
expect zb-unknown nonzero "$LOOM" verify --model gpt3-125m --policy pp --pp 2 --schedule zb-h3 &&
  contains zb-unknown-msg "unknown schedule 'zb-h3'"
expect zb-interleaved nonzero "$LOOM" verify --model gpt3-125m --policy pp --pp 2 --interleave 2 --layers 4 \
  --schedule zb-h1 && contains zb-interleaved-msg "need the interleaved 1F1B schedule, not zb-h1"
expect zb-fold nonzero "$LOOM" plan --model gpt3-125m --policy megatron --pp 2 --schedule zb-h1 --fold on &&
  contains zb-fold-msg "without a zero-bubble schedule or 3f1b"
expect zb-v-chunks nonzero "$LOOM" verify --model gpt3-125m --policy pp --pp 2 --interleave 3 --layers 6 --schedule zb-v &&
  contains zb-v-chunks-msg "schedule zb-v runs 2 model chunks per device in a V, not 3"
expect dualpipe-v-few nonzero "$LOOM" verify --model gpt3-125m --policy pp --pp 4 --schedule dualpipe-v --layers 8 \
  --microbatches 4 --global-batch 8 &&
  contains dualpipe-v-few-msg "4 micro-batches for 4 pipeline devices; DualPipeV needs at least 2 per device (8)"
expect dualpipe-v-chunks nonzero "$LOOM" verify --model gpt3-125m --policy pp --pp 2 --interleave 3 --layers 6 \
  --schedule dualpipe-v && contains dualpipe-v-chunks-msg "schedule dualpipe-v runs 2 model chunks per device in a V, not 3"
expect dualpipe-v-fold nonzero "$LOOM" plan --model gpt3-125m --policy megatron --pp 2 --microbatches 4 \
  --schedule dualpipe-v --fold on && contains dualpipe-v-fold-msg "zero-bubble schedule"
finish
