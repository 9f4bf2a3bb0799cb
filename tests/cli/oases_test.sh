#!/usr/bin/env bash
# `--overlap oases` (policy/overlap.h, exec/passes.h overlap_collectives): shrunk GPT-3 and LLaMA-3 with
# their tensor-parallel blocks as 2 sub-batches and the activation all-reduces asynchronous verify exactly
# as one device, alone, with dp, micro-batches, recomputation and pipelines; the plan's summary names the overlap;
# bad uses are errors that name the cause.
source "$(dirname "$0")/cli_lib.sh"

for model in gpt3-125m llama3-8b; do
  name="oases-$model"
  expect "$name" 0 "$LOOM" verify --model "$model" --policy megatron --tp 2 --overlap oases &&
    contains "$name-pass" "result     PASS" && contains "$name-policy" "dp 1 x tp 2 x pp 1, 1 micro-batch" &&
    contains "$name-overlapped" "activation all-reduces overlapped (start/wait)"
  # With a pipeline (1F1B or GPipe over the sub-batch pairs).
  for extra in "--dp 2 --tp 2" "--tp 2 --microbatches 2" "--tp 2 --recompute full" "--tp 2 --pp 2 --microbatches 2" \
    "--tp 2 --pp 2 --batch 8 --schedule gpipe --recompute full"; do
    name="oases-$model-${extra// /}"
    # shellcheck disable=SC2086
    expect "$name" 0 "$LOOM" verify --model "$model" --policy megatron $extra --overlap oases &&
      contains "$name-pass" "result     PASS"
  done
done
# tp 4 over two NVLink pairs (the layout search's chains: reduce-scatter in the pair, all-reduce across,
# all-gather in the pair), each chain started whole as chained starts: the step still verifies exactly.
for model in gpt3-125m llama3-8b; do
  name="oases-chain-$model"
  expect "$name" 0 "$LOOM" verify --model "$model" --policy megatron --tp 4 --overlap oases \
    --layout-cluster rtx3090-nvlink &&
    contains "$name-pass" "result     PASS" && contains "$name-chains" "reduce-scatter 52"
done
# GPT on 2 tp ranks: 13 all-reduces of activations and their gradients per sub-batch (the embedding's,
# 2 forward and 2 backward in each of the 2 layers, the head's input gradient, the loss's 3), every one
# started and waited for.
expect oases-count 0 "$LOOM" verify --model gpt3-125m --policy megatron --tp 2 --overlap oases &&
  contains oases-count-msg "26 activation all-reduces overlapped (start/wait)"
# Recomputation repeats no all-reduce: values that arrived by communication are checkpoints.
expect oases-recompute 0 "$LOOM" verify --model gpt3-125m --policy megatron --tp 2 --recompute full --overlap oases &&
  contains oases-recompute-msg "collectives: all-reduce 26;" && contains oases-recompute-pass "result     PASS"
# --recompute-collectives (Megatron-LM's full recompute): the recomputation sums again the 2 row-parallel
# all-reduces of each of the 2 layers per sub-batch (13 + 4 without the overlap, 26 + 8 with it), and
# still verifies; with dp 2 on LLaMA too.
expect recollect-megatron 0 "$LOOM" verify --model gpt3-125m --policy megatron --tp 2 --recompute full \
  --recompute-collectives && contains recollect-megatron-msg "collectives: all-reduce 17;" &&
  contains recollect-megatron-pass "result     PASS"
expect recollect-oases 0 "$LOOM" verify --model gpt3-125m --policy megatron --tp 2 --recompute full --overlap oases \
  --recompute-collectives && contains recollect-oases-msg "collectives: all-reduce 34;" &&
  contains recollect-oases-pass "result     PASS"
expect recollect-llama 0 "$LOOM" verify --model llama3-8b --policy megatron --dp 2 --tp 2 --recompute full \
  --overlap oases --recompute-collectives && contains recollect-llama-pass "result     PASS"
expect oases-plan 0 "$LOOM" plan --model gpt3-125m --shrink --tp 2 --gpus 2 --overlap oases --out "$tmp/oases-plan" &&
  contains oases-plan-policy "megatron: dp 1 x tp 2 x pp 1, oases overlap"

# A cluster file's comm_contention reaches the simulator: at 4, communication beside compute runs at a
# quarter of its speed, so the overlapped step on PCIe (rtx3090) is longer than at 1; a plan whose
# collectives all block (no overlap, no gradient buckets) has nothing beside compute and keeps its step.
"$LOOM" clusters --yaml rtx3090 > "$tmp/c1.yaml"
sed 's/^comm_contention: 1 .*/comm_contention: 4/' "$tmp/c1.yaml" > "$tmp/c4.yaml"
step() { "$LOOM" plan --model gpt3-125m --global-batch 8 --tp 2 --gpus 2 --cluster "$@" --out "$tmp/contention" \
  --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["summary"]["step_time_s"])'; }
overlapped1=$(step "$tmp/c1.yaml" --overlap oases) overlapped4=$(step "$tmp/c4.yaml" --overlap oases)
blocking1=$(step "$tmp/c1.yaml" --bucket-cap-mb 0) blocking4=$(step "$tmp/c4.yaml" --bucket-cap-mb 0)
if python3 -c "import sys; a, b, c, d = map(float, sys.argv[1:]); sys.exit(not (b > a * 1.01 and c == d))" \
  "$overlapped1" "$overlapped4" "$blocking1" "$blocking4"; then pass=$((pass+1)); else
  fail "contention: overlapped $overlapped1 -> $overlapped4 s, blocking $blocking1 -> $blocking4 s"; fi
expect oases-tp1 1 "$LOOM" verify --model gpt3-125m --policy megatron --gpus 2 --dp 2 --overlap oases &&
  contains oases-tp1-msg "overlaps tensor parallelism's collectives, but tp is 1"
expect oases-zb 1 "$LOOM" verify --model gpt3-125m --policy megatron --tp 2 --pp 2 --microbatches 2 --schedule zb-h1 \
  --overlap oases && contains oases-zb-msg "pipelines with the 1f1b or gpipe schedule, one model chunk per device"
expect oases-odd 1 "$LOOM" verify --model gpt3-125m --policy megatron --dp 2 --tp 2 --batch 6 --overlap oases &&
  contains oases-odd-msg "op 'wte' reads a batch of 3 per device and micro-batch (input 'input_ids': 6 over dp 2 x 1 micro-batches)"
expect oases-unknown 2 "$LOOM" verify --model gpt3-125m --policy megatron --tp 2 --overlap async &&
  contains oases-unknown-msg "unknown overlap 'async'"
finish
