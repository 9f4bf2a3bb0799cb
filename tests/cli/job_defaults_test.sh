#!/usr/bin/env bash
# The job's defaults, resolved once (api/resolve_request.h) with Megatron-LM's semantics; `plan --json`,
# `compare --json`; compare's "n/a" rows; the OOM advice.
source "$(dirname "$0")/cli_lib.sh"

# dp = the cluster's GPUs / (tp x pp): 64 GPUs with tp 8 and pp 4 give dp 2, micro-batches from the size.
expect megatron-dp 0 "$LOOM" plan --model gpt3-1.3b --cluster dgx-a100x8 --tp 8 --pp 4 --global-batch 64 \
  --micro-batch-size 2 --layers 8 --out "$tmp/dp" &&
  contains megatron-dp-desc "megatron: dp 2 x tp 8 x pp 4, 16 micro-batches, 1f1b" && contains megatron-dp-gpus "on 64 GPUs"
# Without degrees: the policy's defaults on every GPU of the cluster.
expect every-gpu 0 "$LOOM" plan --model gpt3-125m --layers 2 --seq 256 --global-batch 16 --policy dp --out "$tmp/all" &&
  contains every-gpu-desc "dp: dp 8 x tp 1 x pp 1"
# GPUs left unused are an error with the fix.
expect unused nonzero "$LOOM" plan --model gpt3-125m --layers 2 --policy megatron --dp 2 --tp 2 --out "$tmp/x" &&
  contains unused-msg "uses 4 GPUs, but the job has 8 (4 left unused)" && contains unused-hint "--gpus 4"
expect mbs-disagree nonzero "$LOOM" plan --model gpt3-125m --layers 2 --global-batch 16 --policy dp --gpus 2 \
  --microbatches 3 --micro-batch-size 2 --out "$tmp/x" && contains mbs-disagree-msg "disagrees with --micro-batch-size 2"
expect bad-whole nonzero "$LOOM" plan --model gpt3-125m --tp '2 ' --out "$tmp/x" &&
  contains bad-whole-msg "option --tp: '2 ' is not an integer"
expect bad-real nonzero "$LOOM" plan --model gpt3-125m --lr inf --out "$tmp/x" && contains bad-real-msg "not a finite number"
if [ ! -e "$tmp/x" ]; then pass=$((pass+1)); else fail "bad-input-wrote: $tmp/x exists"; fi

# --json: one JSON document on stdout with the options, the resolved degrees and the summary.
expect plan-json 0 "$LOOM" plan --model gpt3-125m --layers 2 --seq 256 --global-batch 8 --tp 2 --gpus 4 --json \
  --out "$tmp/j"
if python3 - "$out" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
assert list(d)[0] == "schema" and d["schema"] == "loom.plan/1"
assert d["resolved"]["dp"] == 2 and d["resolved"]["tp"] == 2 and d["resolved"]["gpus"] == 4
assert d["options"]["tp"] == 2 and d["options"]["gpus"] == 4 and d["options"]["model"] == "gpt3-125m"
assert d["summary"]["step_time_s"] > 0 and len(d["summary"]["per_device"]) == 4
assert "search" not in d and "memory_advice" not in d and "emitted" not in d and len(d["files"]) == 4
PY
then pass=$((pass+1)); else fail "plan-json-fields"; fi

# compare: a policy that cannot plan the model is an n/a row with its reason, not the end of the table.
expect compare-na 0 "$LOOM" compare --model gpt3-125m --layers 2 --seq 256 --global-batch 8 --policies dp,tp &&
  contains compare-na-row "n/a: policy tp: " && contains compare-na-ok "dp: dp 8"
expect compare-json 0 "$LOOM" compare --model gpt3-125m --layers 2 --seq 256 --global-batch 8 --policies dp,tp --json
if python3 - "$out" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
rows = d["rows"]
assert d["schema"] == "loom.compare/1" and [r["policy"] for r in rows] == ["dp", "tp"]
assert "error" not in rows[0] and rows[0]["summary"]["devices"] == 8
assert "summary" not in rows[1] and "tensor parallelism 8" in rows[1]["error"]["message"]
PY
then pass=$((pass+1)); else fail "compare-json-rows"; fi

# Out of memory: exit 3 and the options that cut the largest memory class.
expect oom 3 "$LOOM" plan --model gpt3-13b --cluster rtx3090 --policy dp --gpus 2 --global-batch 2 --seq 512 \
  --layers 8 --out "$tmp/oom" && contains oom-hint "hint: optimizer states are the largest class" &&
  contains oom-fix "--zero 1"

finish
