#!/usr/bin/env bash
# ZeRO-Offload (`--offload`, exec/passes.h offload_to_host): `loom verify` passes with the optimizer or also the
# parameters on the host; a model over a DGX-1 GPU's capacity with ZeRO-3 alone (exit 3) fits offloaded; plans
# without the ZeRO stage the offload needs are refused with the fix.
source "$(dirname "$0")/cli_lib.sh"

for model in gpt3-125m t5-3.9b; do
  expect "verify-$model-optimizer" 0 "$LOOM" verify --model "$model" --policy zero --zero 2 --devices 2 --offload optimizer &&
    contains "verify-$model-optimizer-pass" "result     PASS"
  expect "verify-$model-params" 0 "$LOOM" verify --model "$model" --policy zero --zero 3 --devices 2 --offload optimizer+params &&
    contains "verify-$model-params-pass" "result     PASS"
done
expect verify-megatron 0 "$LOOM" verify --model gpt3-125m --policy megatron --dp 2 --tp 2 --zero 1 --offload optimizer &&
  contains verify-megatron-pass "result     PASS"

big=(plan --model gpt3-6.7b --cluster dgx1 --gpus 2 --policy zero --zero 3 --global-batch 4 --seq 1024 --recompute full)
expect over-capacity 3 "$LOOM" "${big[@]}" --out "$tmp/over"
expect offloaded 0 "$LOOM" "${big[@]}" --offload optimizer --out "$tmp/offloaded" &&
  contains offloaded-description "ZeRO-Offload (optimizer)"

expect needs-zero3 1 "$LOOM" plan --model gpt3-125m --policy zero --zero 2 --gpus 2 --offload optimizer+params --out "$tmp/x" &&
  contains needs-zero3-msg "needs ZeRO-3" && contains needs-zero3-fix "add --zero 3"
expect needs-zero 1 "$LOOM" plan --model gpt3-125m --policy megatron --gpus 2 --offload optimizer --out "$tmp/x" &&
  contains needs-zero-msg "needs ZeRO (stage 1 to 3)"
expect needs-policy 1 "$LOOM" plan --model gpt3-125m --policy dp --gpus 2 --offload optimizer --out "$tmp/x" &&
  contains needs-policy-msg "needs the policy megatron or zero"
expect bad-value 2 "$LOOM" plan --model gpt3-125m --policy zero --zero 3 --gpus 2 --offload cpu --out "$tmp/x" &&
  contains bad-value-msg "unknown offload 'cpu'"
finish
