#!/usr/bin/env bash
# `loom plan` and `loom compare`: the summary, the four files, determinism, OOM and bad input.
source "$(dirname "$0")/cli_lib.sh"

small=(--model gpt3-125m --layers 2 --seq 256 --global-batch 8)

expect plan 0 "$LOOM" plan "${small[@]}" --policy megatron --dp 2 --tp 2 --gpus 4 --out "$tmp/a" &&
  contains plan-policy "megatron: dp 2 x tp 2 x pp 1" && contains plan-step "step " && contains plan-mfu "MFU" &&
  contains plan-memory "peak memory" && contains plan-report "report     $tmp/a/report.html"
for f in plan.json exec.json trace.json report.html; do
  if [ -s "$tmp/a/$f" ]; then pass=$((pass+1)); else fail "plan-file-$f: missing or empty"; fi
done
# Determinism: a second run writes byte-identical files.
expect plan-again 0 "$LOOM" plan "${small[@]}" --policy megatron --dp 2 --tp 2 --gpus 4 --out "$tmp/b"
for f in plan.json exec.json trace.json report.html; do
  if cmp -s "$tmp/a/$f" "$tmp/b/$f"; then pass=$((pass+1)); else fail "plan-deterministic-$f: files differ"; fi
done
# The trace and plan are JSON.
for f in plan.json exec.json trace.json; do
  if python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$tmp/a/$f" 2>/dev/null; then pass=$((pass+1));
  else fail "plan-json-$f: not JSON"; fi
done

# Pipelines and the other policies.
expect plan-pp 0 "$LOOM" plan "${small[@]}" --policy megatron --pp 2 --tp 2 --gpus 4 --microbatches 4 --out "$tmp/pp" &&
  contains plan-pp-desc "pp 2, 4 micro-batches, 1f1b"
expect plan-dp 0 "$LOOM" plan "${small[@]}" --policy dp --gpus 4 --out "$tmp/dp" && contains plan-dp-desc "dp: dp 4"

# A plan that does not fit: reported with the per-device breakdown, files still written, exit 3.
expect plan-oom 3 "$LOOM" plan --model gpt3-13b --cluster rtx3090 --policy dp --gpus 2 --global-batch 2 --seq 512 \
  --layers 8 --out "$tmp/oom" && contains plan-oom-table "OOM        2 of 2 devices exceed 24.00 GiB" && contains plan-oom-breakdown "parameter" &&
  contains plan-oom-msg "does not fit in GPU memory"
if [ -s "$tmp/oom/report.html" ]; then pass=$((pass+1)); else fail "plan-oom-report: missing"; fi

# Recomputation trades step time for activation memory.
expect plan-recompute 0 "$LOOM" plan "${small[@]}" --policy megatron --tp 2 --gpus 2 --recompute full --out "$tmp/rc" &&
  contains plan-recompute-step "step time"
expect plan-bad-recompute nonzero "$LOOM" plan "${small[@]}" --recompute partial --out "$tmp/x" &&
  contains plan-bad-recompute-msg "use none, selective, full or memory-bound"

# Recomputed plans are proven like every other (the ExecPlan interpreter against one device).
for model in gpt3-125m llama3-8b; do
  for mode in selective full; do
    expect "verify-recompute-$model-$mode" 0 "$LOOM" verify --model "$model" --policy megatron --dp 2 --tp 2 \
      --recompute "$mode" && contains "verify-recompute-$model-$mode-pass" "result     PASS"
  done
done
expect verify-recompute-pp 0 "$LOOM" verify --model gpt3-125m --policy megatron --pp 2 --microbatches 4 --recompute full &&
  contains verify-recompute-pp-pass "result     PASS"

# The baselines search their own spaces.
expect plan-megatron-best 0 "$LOOM" plan "${small[@]}" --gpus 4 --policy megatron-best --out "$tmp/mb" &&
  contains plan-megatron-best-search "search     megatron-best:" && contains plan-megatron-best-choice "megatron-best -> megatron"
expect compare-baselines 0 "$LOOM" compare "${small[@]}" --gpus 4 --policies megatron-best,deepspeed-best &&
  contains compare-deepspeed "deepspeed-best -> zero"

# compare ranks the policies.
expect compare 0 "$LOOM" compare "${small[@]}" --gpus 4 --policies dp,tp,dp-tp &&
  contains compare-header "rank" && contains compare-dp "dp: dp 4" && contains compare-tp "tp: dp 1 x tp 4"

# Vocabulary-parallel LM head and loss under tensor parallelism: each rank computes logits over its
# half of llama3-8b's 128256 classes, and the plans are proven by the interpreter at tp 2 and dp 2 x tp 2.
expect plan-vocab-parallel 0 "$LOOM" plan --model llama3-8b --layers 2 --seq 256 --global-batch 8 --policy megatron \
  --tp 2 --gpus 2 --out "$tmp/vocab"
if grep -qF '"outputs": [{"tensor": "lm_head", "box": [[0, 8], [0, 256], [64128, 128256]]}]' "$tmp/vocab/plan.json"; then
  pass=$((pass+1)); else fail "plan-vocab-parallel-logits: no lm_head part over classes [64128, 128256)"; fi
for model in gpt3-125m llama3-8b; do
  for degrees in "--tp 2" "--dp 2 --tp 2"; do
    name="verify-vocab-$model-${degrees//[ -]/}"
    # shellcheck disable=SC2086
    expect "$name" 0 "$LOOM" verify --model "$model" --layers 2 --policy megatron $degrees && contains "$name-pass" "result     PASS"
  done
done

# Folded planning: one micro-batch of one replica, repeated and mirrored; exec.json holds the slice and
# how it unfolds. A non-megatron job, or ZeRO across nodes, cannot fold; --fold off plans every sub-op.
fold=(--model llama3-8b --layers 4 --seq 256 --global-batch 16 --policy megatron --dp 2 --tp 2 --pp 2 --microbatches 4)
# (dp 2 x tp 2 x pp 2: every GPU of the default dgx-a100)
expect plan-fold 0 "$LOOM" plan "${fold[@]}" --fold on --out "$tmp/fold" &&
  contains plan-fold-line "folded     the plan is one micro-batch of one replica on 4 devices" &&
  contains plan-fold-classes "of 8 devices, one per device class"
if grep -qF '"fold": {"dp": 2, "tp": 2, "pp": 2, "chunks": 1, "micro_batches": 4' "$tmp/fold/exec.json"; then
  pass=$((pass+1)); else fail "plan-fold-exec: exec.json has no fold object"; fi
expect plan-fold-again 0 "$LOOM" plan "${fold[@]}" --fold on --out "$tmp/fold2"
for f in plan.json exec.json trace.json report.html; do
  if cmp -s "$tmp/fold/$f" "$tmp/fold2/$f"; then pass=$((pass+1)); else fail "plan-fold-deterministic: $f differs"; fi
done
expect plan-fold-off 0 "$LOOM" plan "${fold[@]}" --fold off --out "$tmp/unfolded" &&
  if grep -q "^folded" <<<"$out"; then fail "plan-fold-off: printed a folded line"; else pass=$((pass+1)); fi
# ZeRO folds over micro-batches within a node (exec/fold.h), but not ZeRO-1 with tp > 1 (policy/plan_size.h).
expect plan-fold-zero2 0 "$LOOM" plan "${fold[@]}" --zero 2 --fold on --out "$tmp/zfold" &&
  contains plan-fold-zero2-line "folded     the plan is one micro-batch of every replica on 8 devices (dp 2 x tp 2 x pp 2: ZeRO's shards and collectives are among the replicas), repeated over 4 micro-batches"
expect plan-fold-zero1-tp nonzero "$LOOM" plan "${fold[@]}" --zero 1 --fold on --out "$tmp/x" &&
  contains plan-fold-zero1-tp-msg "not ZeRO-1 with tp > 1"
expect plan-fold-bad nonzero "$LOOM" plan "${fold[@]}" --fold sometimes --out "$tmp/x"

# Bad input: named, non-zero, nothing half-written.
expect plan-bad-model nonzero "$LOOM" plan --model nosuch --out "$tmp/x" && contains plan-bad-model-msg "nosuch"
expect plan-bad-policy nonzero "$LOOM" plan "${small[@]}" --policy zigzag --out "$tmp/x" && contains plan-bad-policy-msg "zigzag"
expect plan-bad-cluster nonzero "$LOOM" plan "${small[@]}" --cluster nosuch --out "$tmp/x" &&
  contains plan-bad-cluster-msg "nosuch"
expect plan-too-many nonzero "$LOOM" plan "${small[@]}" --policy dp --gpus 16 --out "$tmp/x" &&
  contains plan-too-many-msg "cluster 'dgx-a100' has 8"
expect plan-bad-degrees nonzero "$LOOM" plan "${small[@]}" --dp 2 --tp 2 --gpus 8 --out "$tmp/x" &&
  contains plan-bad-degrees-msg "dp 2 x tp 2 x pp 1 uses 4 GPUs, but the job has 8 (4 left unused)" &&
  contains plan-bad-degrees-hint "hint: pass --gpus 4 to plan on part of the cluster, or leave --dp out to use them all"
expect plan-bad-profile nonzero "$LOOM" plan "${small[@]}" --profile "$tmp/none.json" --out "$tmp/x"
if [ ! -e "$tmp/x" ]; then pass=$((pass+1)); else fail "plan-bad-input-wrote: $tmp/x exists"; fi
expect compare-bad nonzero "$LOOM" compare "${small[@]}" --policies dp,nosuch && contains compare-bad-msg "nosuch"

finish
