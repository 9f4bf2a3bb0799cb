#!/usr/bin/env bash
# `loom plan --policy auto` (docs/search.md): the search line, --explain's finalists and why, --json's search
# summary with no progress line, --budget, determinism, and auto next to the baselines in `loom compare`.
source "$(dirname "$0")/cli_lib.sh"

small=(--model gpt3-125m --layers 2 --seq 256 --global-batch 8 --gpus 4)

expect auto 0 "$LOOM" plan "${small[@]}" --policy auto --explain --out "$tmp/a" &&
  contains auto-search "search     auto: " && contains auto-priced " priced from " &&
  contains auto-finalists "finalist (in planning order)" && contains auto-chosen "<- chosen" &&
  contains auto-why "why        " && contains auto-policy "policy     auto -> " &&
  contains auto-analytic-parts "analytic: pipeline " && contains auto-full-parts "full, busiest device: compute "
# Deterministic: the same choice and byte-identical files.
expect auto-again 0 "$LOOM" plan "${small[@]}" --policy auto --out "$tmp/b"
for f in plan.json exec.json; do
  if cmp -s "$tmp/a/$f" "$tmp/b/$f"; then pass=$((pass+1)); else fail "auto-deterministic-$f: files differ"; fi
done
# --json: one JSON document on stdout (the live line is silent), with the search summary.
out=$("$LOOM" plan "${small[@]}" --policy auto --json --out "$tmp/j" 2>"$tmp/j.err")
if python3 -c 'import json,sys; d=json.load(sys.stdin); s=d["search"]; assert s["baseline"]=="auto" and s["priced"]>0 and s["evaluated"]>=1 and s["finalists"][s["winner"]]["fits"]' <<<"$out"; then
  pass=$((pass+1)); else fail "auto-json: no search summary"; fi
# Each finalist's parts add up: analytic pipeline + sync + optimizer = its analytic step; on the busiest device
# of its full plan, compute + exposed communication + idle = its full step.
if python3 -c '
import json,sys
for r in json.load(sys.stdin)["search"]["finalists"]:
    a = r["analytic_pipeline_seconds"] + r["analytic_sync_seconds"] + r["analytic_optimizer_seconds"]
    assert abs(a - r["analytic_step_seconds"]) <= 1e-9 * max(1, a), r
    if r["planned"]:
        f = r["compute_seconds"] + r["exposed_communication_seconds"] + r["idle_seconds"]
        assert abs(f - r["step_seconds"]) <= 1e-6 * r["step_seconds"], r' <<<"$out"; then
  pass=$((pass+1)); else fail "auto-json-parts: the finalists parts do not add up to their steps"; fi
if [ -s "$tmp/j.err" ]; then fail "auto-json-quiet: stderr not empty: $(head -2 "$tmp/j.err")"; else pass=$((pass+1)); fi
# A budget spent at once still returns a plan, planned in full, and says so.
expect auto-budget 0 "$LOOM" plan "${small[@]}" --policy auto --budget 0.000001 --out "$tmp/c" &&
  contains auto-budget-spent "(budget spent)" && contains auto-budget-planned "1 planned in full"
expect auto-budget-bad 2 "$LOOM" plan "${small[@]}" --policy auto --budget -1
expect auto-compare 0 "$LOOM" compare "${small[@]}" --policies auto,megatron-best,deepspeed-best &&
  contains auto-compare-row "auto -> "
expect auto-no-config 1 "$LOOM" plan --model gpt3-125m --layers 3 --global-batch 1 --gpus 3 --policy auto &&
  contains auto-no-config-msg "auto has no configuration of 3 GPUs for a global batch of 1"
# Every candidate too large to plan explicitly and unfoldable (ZeRO over 1024 GPUs): an error naming why.
expect ds-unplannable 1 "$LOOM" plan --model gpt3-175b --cluster dgx-a100x128 --global-batch 2048 --policy deepspeed-best &&
  contains ds-unplannable-msg "can be planned in full" && contains ds-unplannable-hint "hint: "
finish
