#!/usr/bin/env bash
# `loom plan --graph` / `loom compare --graph`: a graph file (as the Python tracer writes it: ops without
# annotations) planned at its recorded sizes, and the option errors.
source "$(dirname "$0")/cli_lib.sh"

expect graph-json 0 "$LOOM" graph --model gpt3-125m --layers 2 --forward-only --batch 8 --seq 64 --json "$tmp/g.json"
# The tracer leaves annotations to the engine's registry.
python3 -c 'import json,sys; g=json.load(open(sys.argv[1])); [op.pop("annotation") for op in g["ops"]]; json.dump(g, open(sys.argv[2], "w"))' \
  "$tmp/g.json" "$tmp/traced.json"

expect plan-graph 0 "$LOOM" plan --graph "$tmp/traced.json" --policy megatron --dp 2 --tp 2 --gpus 4 --out "$tmp/a" &&
  contains plan-graph-policy "megatron: dp 2 x tp 2 x pp 1" && contains plan-graph-step "step time"
# Same graph, same plan as the preset it came from.
expect plan-preset 0 "$LOOM" plan --model gpt3-125m --layers 2 --global-batch 8 --seq 64 --policy megatron --dp 2 --tp 2 --gpus 4 \
  --fold off --out "$tmp/b"
if cmp -s "$tmp/a/exec.json" "$tmp/b/exec.json"; then pass=$((pass+1)); else fail "plan-graph-equals-preset: exec.json differs"; fi
expect plan-graph-pp 0 "$LOOM" plan --graph "$tmp/traced.json" --policy megatron --pp 2 --gpus 2 --microbatches 2 --out "$tmp/pp" &&
  contains plan-graph-pp-desc "pp 2, 2 micro-batches"
# A traced HuggingFace GPT-2 (tests/policy/traced_gpt2.json; its Conv1Ds are matmuls with [in, out]
# weights) under Megatron tensor parallelism.
expect plan-traced-gpt2-tp 0 "$LOOM" plan --graph "$(dirname "$0")/../policy/traced_gpt2.json" --policy megatron --tp 2 --gpus 2 \
  --out "$tmp/hf" && contains plan-traced-gpt2-tp-policy "megatron: dp 1 x tp 2 x pp 1"
expect compare-graph 0 "$LOOM" compare --graph "$tmp/traced.json" --gpus 4 && contains compare-graph-title "$tmp/traced.json on dgx-a100"

expect both 1 "$LOOM" plan --graph "$tmp/traced.json" --model gpt3-125m && contains both-msg "exactly one of --model NAME, --model-file FILE, --arch FAMILY or --graph FILE"
expect neither 1 "$LOOM" plan --policy dp && contains neither-msg "exactly one of --model NAME, --model-file FILE, --arch FAMILY or --graph FILE"
# A graph without a "sizes" section plans at its own batch only (docs/json.md).
expect resize nonzero "$LOOM" plan --graph "$tmp/traced.json" --global-batch 16 &&
  contains resize-msg "the graph was traced at batch 8 and does not record which of its sizes are the batch"
expect same-batch 0 "$LOOM" plan --graph "$tmp/traced.json" --global-batch 8 --gpus 2 --out "$tmp/same"
expect resize-seq 1 "$LOOM" plan --graph "$tmp/traced.json" --seq 32 && contains resize-seq-msg "a graph file keeps the sizes"
# The baselines' searches over a graph file: the same candidates and the same choice as on the preset it came from.
expect baseline 0 "$LOOM" plan --graph "$tmp/traced.json" --policy megatron-best --gpus 4 --out "$tmp/mb" &&
  contains baseline-search "search     megatron-best: 42 configurations, 42 priced" &&
  contains baseline-choice "megatron-best -> megatron: dp 1 x tp 4 x pp 1, sequence parallel on 4 GPUs"
expect baseline-preset 0 "$LOOM" plan --model gpt3-125m --layers 2 --global-batch 8 --seq 64 --policy megatron-best \
  --gpus 4 --fold off --out "$tmp/mbp" && contains baseline-preset-choice "megatron-best -> megatron: dp 1 x tp 4 x pp 1, sequence parallel on 4 GPUs"
expect baseline-deepspeed 0 "$LOOM" plan --graph "$tmp/traced.json" --policy deepspeed-best --gpus 4 --out "$tmp/ds" &&
  contains baseline-deepspeed-choice "deepspeed-best -> zero: dp 4"
expect fold 1 "$LOOM" plan --graph "$tmp/traced.json" --fold on --dp 2 --gpus 2 && contains fold-msg "a graph file cannot be folded"
expect missing nonzero "$LOOM" plan --graph "$tmp/none.json" && contains missing-msg "none.json"
echo '{"format": "loom-graph"' > "$tmp/bad.json"
expect malformed 1 "$LOOM" plan --graph "$tmp/bad.json" && contains malformed-msg "$tmp/bad.json: line 2 column 1: malformed JSON: syntax error"

finish
