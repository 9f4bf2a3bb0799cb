#!/usr/bin/env bash
# nnScaler's interlaced pipeline (policy/interlaced.h; --policy interlaced): `loom verify` proves it on shrunk
# T5 and mBART with pp 2 and pp 4, tp 1 and 2 (and dp 2); `loom plan` names it and the order it picked;
# bad inputs fail with the fix.
source "$(dirname "$0")/cli_lib.sh"

for model in t5-3.9b mbart-4.7b; do
  for pp in 2 4; do
    for tp in 1 2; do
      name="$model-pp$pp-tp$tp"
      expect "$name" 0 "$LOOM" verify --model "$model" --policy interlaced --pp "$pp" --tp "$tp" --layers 4 \
        --microbatches 4 &&
        contains "$name-pass" "result     PASS" &&
        contains "$name-policy" "policy     interlaced: dp 1 x tp $tp x pp $pp, 4 micro-batches (1f1b) on $((pp * tp)) devices"
    done
  done
done
expect dp2 0 "$LOOM" verify --model t5-3.9b --policy interlaced --dp 2 --pp 2 --microbatches 2 &&
  contains dp2-pass "result     PASS"
# The default degrees on 8 devices: pp 4 x tp 2.
expect plan-defaults 0 "$LOOM" plan --model t5-3.9b --shrink --policy interlaced --layers 4 --microbatches 4 --gpus 8 --out "$tmp/plan" &&
  contains plan-defaults-policy "policy     interlaced: dp 1 x tp 2 x pp 4"
# The plan names the interlaced order it picked, in the summary and in its JSON: the H's per barrier, the
# warm-up beyond 1F1B's, what each stage holds and the caps the memory gave (t5-3.9b on 4 V100s, as in
# nnScaler's Fig. 8: memory to spare, so more H's per barrier and more held than 1F1B's 4/3/2/1).
expect order 0 "$LOOM" plan --model t5-3.9b --vocab 250112 --cluster dgx2 --gpus 4 --policy interlaced --pp 4 --tp 1 \
  --microbatches 8 --global-batch 32 --recompute full --dtype f16 --fold off --out "$tmp/order" &&
  contains order-summary "interlaced order: H in groups of 5, warm-up +4, holding 8/7/6/5 micro-batches (memory caps 8/8/8/8)"
expect order-json 0 "$LOOM" plan --model t5-3.9b --vocab 250112 --cluster dgx2 --gpus 4 --policy interlaced --pp 4 \
  --tp 1 --microbatches 8 --global-batch 32 --recompute full --dtype f16 --fold off --out "$tmp/order" --json &&
  contains order-json-description "full recompute, interlaced order: H in groups of 5, warm-up +4, holding 8/7/6/5"
# --vocab replaces a preset's vocabulary (mT5's for nnScaler's Fig. 8): T5-3.9B's table grows by
# (250112 - 32128) x 2048 parameters (2 layers: 183.26M -> 629.69M).
expect vocab 0 "$LOOM" plan --model t5-3.9b --vocab 250112 --layers 2 --policy interlaced --pp 2 --microbatches 2 \
  --global-batch 2 --seq 64 --gpus 2 --fold off --out "$tmp/vocab" &&
  contains vocab-params "t5-3.9b: 629.69M parameters"
expect vocab-graph 1 "$LOOM" plan --graph "$tmp/vocab/plan.json" --vocab 1000 &&
  contains vocab-graph-msg "--vocab resize a preset"

# Bad inputs.
expect no-embedding 1 "$LOOM" verify --model resnet-50 --policy interlaced --pp 2 &&
  contains no-embedding-msg "has no token embedding (an 'embedding' op reading a parameter table)"
expect untied 1 "$LOOM" verify --model llama3-8b --policy interlaced --pp 2 &&
  contains untied-msg "reads the embedding table 'embed_tokens.weight': the head is not tied to it"
expect not-dividing 1 "$LOOM" verify --model t5-3.9b --policy interlaced --pp 3 --layers 6 --microbatches 3 &&
  contains not-dividing-msg "the 64 rows of embedding table 'shared.weight' do not divide into pp x tp = 3 parts"
expect gpipe 1 "$LOOM" verify --model t5-3.9b --policy interlaced --pp 2 --schedule gpipe &&
  contains gpipe-msg "does not combine with the gpipe schedule"
expect zero 1 "$LOOM" verify --model t5-3.9b --policy interlaced --zero 1 &&
  contains zero-msg "policy 'interlaced' does not use ZeRO"

finish
