#!/usr/bin/env bash
# `loom verify` of ZeRO (policy/zero.h): every stage of shrunk GPT-3, LLaMA-3 and T5 on 2 and 4
# data-parallel ranks, and inside Megatron's dp x tp, trains exactly as one device and closes its step;
# gradient accumulation (ZeRO-2 and -3 reduce-scatter each micro-batch's gradients into the partition);
# bad stages and policies.
source "$(dirname "$0")/cli_lib.sh"

for model in gpt3-125m llama3-8b t5-3.9b; do
  for stage in 1 2 3; do
    for n in 2 4; do
      name="zero$stage-$model-dp$n"
      expect "$name" 0 "$LOOM" verify --model "$model" --policy zero --zero "$stage" --devices "$n" &&
        contains "$name-pass" "result     PASS" && contains "$name-closed" "end the step where the next one loads them"
    done
  done
done
for stage in 1 3; do
  for model in gpt3-125m llama3-8b; do
    name="megatron-zero$stage-$model"
    expect "$name" 0 "$LOOM" verify --model "$model" --policy megatron --dp 2 --tp 2 --zero "$stage" &&
      contains "$name-pass" "result     PASS" && contains "$name-stage" "ZeRO stage $stage over the dp ranks"
  done
done

# What each stage moves: ZeRO-1 reduce-scatters gradients and all-gathers parameters at the step's end;
# ZeRO-3 gathers parameters for the forward and the backward.
expect zero1-collectives 0 "$LOOM" verify --model gpt3-125m --policy zero --zero 1 --devices 2 &&
  contains zero1-collectives-msg "collectives: all-gather 28, reduce-scatter 28; 0 sends"
expect zero3-collectives 0 "$LOOM" verify --model gpt3-125m --policy zero --zero 3 --devices 2 &&
  contains zero3-collectives-msg "collectives: all-gather 58, reduce-scatter 28; 0 sends"
# A weight no dimension of which dp divides stays whole, with a note.
expect zero-indivisible 0 "$LOOM" verify --model gpt3-125m --policy zero --zero 2 --devices 3 --batch 6 &&
  contains zero-indivisible-note "note       ZeRO: 'wte.weight' [64, 16]: no dimension of its shard [64, 16] divisible by dp 3" &&
  contains zero-indivisible-pass "result     PASS"

# Gradient accumulation without a pipeline: micro-batches summed on each device, one all-reduce a step.
expect accumulate 0 "$LOOM" verify --model gpt3-125m --policy megatron --dp 2 --microbatches 2 &&
  contains accumulate-collectives "collectives: all-reduce 28;" && contains accumulate-pass "result     PASS"
expect accumulate-zero2 0 "$LOOM" verify --model llama3-8b --policy zero --zero 2 --devices 2 --microbatches 2 &&
  contains accumulate-zero2-pass "result     PASS"
# ZeRO-3 gathers the weights once per use: each micro-batch's forward and backward gather their own
# (58 -> 114: a weight no op reads per micro-batch is gathered once), and a recomputed forward gathers
# again rather than keep the forward's copies until the backward. Gradients stay partitioned: each
# micro-batch's are reduce-scattered into the partition (28 -> 54: the position table's gradient, summed
# outside the micro-batches, and the tied token table's, whose two partial sums each device adds over its
# micro-batches first, once each).
expect accumulate-zero3 0 "$LOOM" verify --model gpt3-125m --policy zero --zero 3 --devices 2 --microbatches 2 &&
  contains accumulate-zero3-collectives "collectives: all-gather 114, reduce-scatter 54; 0 sends" &&
  contains accumulate-zero3-pass "result     PASS"
# ZeRO-2 and -3 with 2 and 4 micro-batches, on the tied GPT-3 (its LM head is the token table) and
# LLaMA, alone and inside Megatron's dp x tp: every micro-batch reduce-scattered, exact, step closed.
for model in gpt3-125m llama3-8b; do
  for stage in 2 3; do
    for micro in 2 4; do
      name="partitioned-zero$stage-$model-mb$micro"
      expect "$name" 0 "$LOOM" verify --model "$model" --policy zero --zero "$stage" --devices 2 --batch 8 \
        --microbatches "$micro" &&
        contains "$name-pass" "result     PASS" && contains "$name-closed" "end the step where the next one loads them"
    done
    name="partitioned-megatron-zero$stage-$model"
    expect "$name" 0 "$LOOM" verify --model "$model" --policy megatron --dp 2 --tp 2 --zero "$stage" --microbatches 2 &&
      contains "$name-pass" "result     PASS"
  done
done
expect partitioned-zero2-collectives 0 "$LOOM" verify --model llama3-8b --policy zero --zero 2 --devices 2 --batch 8 \
  --microbatches 4 &&
  contains partitioned-zero2-collectives-msg "reduce-scatter 84;"
expect partitioned-zero2-once 0 "$LOOM" verify --model llama3-8b --policy zero --zero 2 --devices 2 --batch 8 &&
  contains partitioned-zero2-once-msg "reduce-scatter 21;"
expect recompute-zero3 0 "$LOOM" verify --model llama3-8b --policy zero --zero 3 --devices 2 --microbatches 2 --recompute full &&
  contains recompute-zero3-pass "result     PASS"
expect recompute-megatron-zero3 0 "$LOOM" verify --model llama3-8b --policy megatron --dp 2 --tp 2 --zero 3 \
  --microbatches 2 --recompute selective &&
  contains recompute-megatron-zero3-pass "result     PASS"

# Bad input.
expect zero-no-stage nonzero "$LOOM" verify --model gpt3-125m --policy zero --devices 2 &&
  contains zero-no-stage-msg "needs a ZeRO stage"
expect zero-bad-stage nonzero "$LOOM" verify --model gpt3-125m --policy zero --zero 4 --devices 2
expect zero-wrong-policy nonzero "$LOOM" verify --model gpt3-125m --policy dp --zero 1 --devices 2 &&
  contains zero-wrong-policy-msg "policy 'dp' does not use ZeRO"

finish
