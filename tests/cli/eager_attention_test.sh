#!/usr/bin/env bash
# Eager attention (--attention eager; models/zoo.h AttentionImpl): `loom verify` proves it on shrunk GPT plain,
# with tp 2 and with coshard 4, on LLaMA (grouped-query) and T5 (bias, cross-attention) with tp 2; `loom graph`
# shows the scores it saves; `loom plan` names it; bad inputs fail with the fix. --attention eager-fp32
# (Megatron-LM's fp32 softmax path) likewise on 16-bit GPT with tp 2, dp x tp x pp and coshard.
source "$(dirname "$0")/cli_lib.sh"

for args in "--devices 1" "--tp 2" "--tp 1 --dp 2 --coshard 4" "--tp 2 --coshard 2"; do
  name="gpt-${args// /}"
  # shellcheck disable=SC2086
  expect "$name" 0 "$LOOM" verify --model gpt3-125m --attention eager --policy megatron $args &&
    contains "$name-pass" "result     PASS" && contains "$name-line" "eager attention"
done
expect coshard-line 0 "$LOOM" verify --model gpt3-125m --attention eager --policy megatron --tp 1 --dp 2 --coshard 4 &&
  contains coshard-line-regions "coshard 4 parts per tp rank on layers 0: (attention,mlp): 4 regions"
for model in llama3-8b t5-3.9b; do
  expect "tp-$model" 0 "$LOOM" verify --model "$model" --attention eager --policy megatron --tp 2 &&
    contains "tp-$model-pass" "result     PASS"
done

for args in "--tp 2 --gpus 2" "--dp 2 --tp 2 --pp 2 --microbatches 2 --gpus 8" "--tp 2 --coshard 2 --gpus 2"; do
  name="fp32-${args// /}"
  # shellcheck disable=SC2086
  expect "$name" 0 "$LOOM" verify --model gpt3-1.3b-16k --dtype f16 --attention eager-fp32 --policy megatron $args &&
    contains "$name-pass" "result     PASS" && contains "$name-line" "eager-fp32 attention"
done

# The scores are saved: a 16k-token layer keeps far more than the fused kernel's q, k, v and output.
saved() { "$LOOM" graph --model gpt3-1.3b-16k --layers 1 --batch 1 --dtype f16 --attention "$1" |
  awk '/activations \(saved\)/ { v = $3; if ($4 == "MiB") v /= 1024; if ($4 == "KiB") v /= 1048576; print v }'; }
fused=$(saved fused)
eager=$(saved eager)
if awk -v f="$fused" -v e="$eager" 'BEGIN { exit !(e > f + 30) }'; then pass=$((pass+1));
else out="fused $fused GiB, eager $eager GiB"; fail "graph-saved: eager should save over 30 GiB more (two fp16 [32 16k 16k] tensors)"; fi
# eager-fp32 keeps the fp32 probabilities and dropout's fp16 input in place of the fp16 probabilities: 4 bytes more
# per score element, 32 GiB more on [32 16k 16k].
fp32=$(saved eager-fp32)
if awk -v e="$eager" -v g="$fp32" 'BEGIN { exit !(g > e + 31.9 && g < e + 32.1) }'; then pass=$((pass+1));
else out="eager $eager GiB, eager-fp32 $fp32 GiB"; fail "graph-saved-fp32: eager-fp32 should save 32 GiB more than eager"; fi

expect plan-line 0 "$LOOM" plan --model gpt3-125m --layers 2 --seq 256 --global-batch 8 --attention eager --tp 2 \
  --gpus 2 --out "$tmp/plan" && contains plan-line-model "(bf16, adamw, eager attention)"

# Bad inputs.
expect no-attention 1 "$LOOM" verify --model resnet-50 --attention eager &&
  contains no-attention-msg "has no scaled dot-product attention to build eagerly" &&
  contains no-attention-hint "drop --attention eager"
expect bad-name 2 "$LOOM" plan --model gpt3-125m --attention flash &&
  contains bad-name-msg "unknown attention 'flash'" && contains bad-name-hint "eager-fp32"
expect no-attention-fp32 1 "$LOOM" verify --model resnet-50 --attention eager-fp32 &&
  contains no-attention-fp32-hint "drop --attention eager-fp32"
expect graph-bad-name 1 "$LOOM" graph --model gpt3-125m --attention flash &&
  contains graph-bad-name-msg "option --attention: unknown attention 'flash'"
"$LOOM" graph --model gpt3-125m --layers 1 --forward-only --json "$tmp/g.json" >/dev/null
expect graph-file 1 "$LOOM" plan --graph "$tmp/g.json" --attention eager &&
  contains graph-file-msg "a graph file keeps the ops it was traced with"

finish
