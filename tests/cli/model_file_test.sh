#!/usr/bin/env bash
# Model files and --arch (docs/models.md): models/ is what `loom models --write-files` writes; a preset, its
# model file and the same numbers as --arch flags give identical plans (`loom plan --json`, plan.json); the
# other commands take them too; bad files and flags are errors naming the file and the field, exit 1.
source "$(dirname "$0")/cli_lib.sh"
models=$(cd "$(dirname "$0")/../../models" && pwd)

# The committed files are the presets as the code states them.
mkdir "$tmp/written"
expect write-files 0 "$LOOM" models --write-files "$tmp/written" && contains write-files-count "wrote 58 model files"
expect write-files-no-dir 1 "$LOOM" models --write-files "$tmp/no-such-dir" && contains write-files-no-dir-msg "is not a directory"
if diff -r "$models" "$tmp/written" >/dev/null; then pass=$((pass+1)); else fail "models-folder: differs from \`loom models --write-files\`"; fi

# same_plan NAME ARGS_A -- ARGS_B: both plan (--json and --out) and give the same plan: the JSON documents
# equal except the echoed options, the model's label and the output paths, and byte-identical plan.json and
# exec.json.
same_plan() {
  local name=$1; shift
  local a=() b=()
  while [ "$1" != -- ]; do a+=("$1"); shift; done; shift
  b=("$@")
  expect "$name-a" 0 "$LOOM" plan "${a[@]}" --json --out "$tmp/$name-a" && echo "$out" >"$tmp/$name-a.json" || return
  expect "$name-b" 0 "$LOOM" plan "${b[@]}" --json --out "$tmp/$name-b" && echo "$out" >"$tmp/$name-b.json" || return
  if out=$(python3 - "$tmp/$name-a.json" "$tmp/$name-b.json" 2>&1 <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for doc in (a, b):
    doc.pop("options")
    doc.pop("files")
    doc["summary"].pop("model")
assert a == b, (a, b)
PY
  ); then pass=$((pass+1)); else fail "$name: the --json plans differ"; fi
  for f in plan.json exec.json; do
    if cmp -s "$tmp/$name-a/$f" "$tmp/$name-b/$f"; then pass=$((pass+1)); else fail "$name-$f: files differ"; fi
  done
}

common=(--cluster dgx-a100 --gpus 8 --policy megatron --tp 2 --pp 2 --recompute full)
# Issue 16's acceptance: GPT-3 1.3B by its numbers, as a file, and as the preset.
same_plan gpt-file --model gpt3-1.3b "${common[@]}" -- --model-file "$models/gpt3-1.3b.yaml" "${common[@]}"
same_plan gpt-arch --model gpt3-1.3b "${common[@]}" -- --arch gpt --layers 24 --hidden 2048 --heads 16 --vocab 50257 \
  --seq 2048 --global-batch 512 "${common[@]}"
# Megatron-LM's own flag names are accepted as aliases.
same_plan gpt-megatron --model gpt3-1.3b "${common[@]}" -- --arch gpt --num-layers 24 --hidden-size 2048 \
  --num-attention-heads 16 --vocab 50257 --seq-length 2048 --global-batch-size 512 "${common[@]}"
small=(--layers 4 --global-batch 16 --cluster dgx-a100 --gpus 4 --policy megatron --tp 2 --dp 2)
same_plan llama-gqa --model llama2-70b "${small[@]}" -- --arch llama --hidden 8192 --heads 64 --kv-heads 8 \
  --ffn 28672 --vocab 32000 --seq 4096 --norm-eps 1e-5 "${small[@]}"
same_plan t5-file --model t5-3.9b "${small[@]}" -- --model-file "$models/t5-3.9b.yaml" "${small[@]}"
same_plan moe-arch --model moe-380m "${small[@]}" -- --arch moe --hidden 768 --ffn 6144 --experts 8 --vocab 32000 \
  --seq 1024 "${small[@]}"
# Folding rebuilds the model at micro-batch size through the same path.
folded=(--layers 2 --global-batch 8 --gpus 4 --policy megatron --dp 2 --tp 2 --microbatches 2 --fold on)
same_plan fold-file --model gpt3-125m "${folded[@]}" -- --model-file "$models/gpt3-125m.yaml" "${folded[@]}"
same_plan fold-arch --model gpt3-125m "${folded[@]}" -- --arch gpt --hidden 768 --heads 12 --seq 2048 "${folded[@]}"
if grep -qF '"fold"' "$tmp/fold-arch-b/exec.json"; then pass=$((pass+1)); else fail "fold-arch: not folded"; fi
# A model file with sizes of its own resizes like a preset.
same_plan swin-file --model swin-1.8b --layers 8 --seq 384 --global-batch 8 --gpus 2 --tp 2 -- \
  --model-file "$models/swin-1.8b.yaml" --layers 8 --seq 384 --global-batch 8 --gpus 2 --tp 2

# The architecture by numbers the issue names: 24 heads over 2304.
expect arch-acceptance 0 "$LOOM" plan --arch gpt --layers 24 --hidden 2304 --heads 24 --vocab 51200 --seq 2048 \
  --global-batch 512 --gpus 8 --tp 2 --pp 2 --recompute full --out "$tmp/acc" && contains arch-acceptance-model "model      gpt:" &&
  contains arch-acceptance-summary "gpt on dgx-a100, policy megatron" &&
  contains arch-acceptance-step "step time"

# The other commands that take a model.
expect graph-file 0 "$LOOM" graph --model-file "$models/llama3-8b.yaml" --layers 2 --batch 1 &&
  contains graph-file-name "graph llama3-8b"
"$LOOM" graph --model llama3-8b --layers 2 --batch 1 >"$tmp/graph-preset.txt"
if [ "$out" = "$(cat "$tmp/graph-preset.txt")" ]; then pass=$((pass+1)); else fail "graph-file: differs from --model"; fi
expect graph-arch 0 "$LOOM" graph --arch resnet --layers 50 --channels 32 --batch 2 --forward-only &&
  contains graph-arch-name "graph resnet"
expect verify-file 0 "$LOOM" verify --model-file "$models/gpt3-125m.yaml" --policy megatron --tp 2 && contains verify-file-model "$models/gpt3-125m.yaml"
expect verify-arch 0 "$LOOM" verify --arch llama --layers 2 --hidden 64 --heads 8 --kv-heads 2 --ffn 96 --policy megatron --tp 2

# Bad files: exit 1, `loom: error:` naming the file and the field, nothing planned.
bad() {  # bad NAME TEXT EXPECTED... : a model file holding TEXT fails with each EXPECTED string
  local name=$1 text=$2; shift 2
  printf '%s' "$text" >"$tmp/$name.yaml"
  expect "$name" 1 "$LOOM" plan --model-file "$tmp/$name.yaml" --out "$tmp/$name-out" || return
  contains "$name-file" "loom: error: model file '$tmp/$name.yaml'"
  for want in "$@"; do contains "$name-msg" "$want"; done
  if [ ! -e "$tmp/$name-out" ]; then pass=$((pass+1)); else fail "$name: wrote output"; fi
}
bad malformed $'family: gpt\nlayers: [24\n' "malformed YAML at line"
bad unknown-key $'family: gpt\nlayers: 24\nhiden: 2048\nheads: 16\n' "unknown field 'hiden'" "did you mean 'hidden'?"
bad duplicate $'family: gpt\nlayers: 24\nlayers: 12\nhidden: 2048\nheads: 16\n' "field 'layers' is given twice"
bad heads $'family: gpt\nlayers: 24\nhidden: 2048\nheads: 24\n' "'heads' 24 does not divide 'hidden' 2048" "'head_dim'"
bad kv-heads $'family: llama\nlayers: 2\nhidden: 64\nheads: 8\nkv_heads: 3\nffn: 96\n' "'kv_heads' 3 does not divide 'heads' 8"
bad zero $'family: gpt\nlayers: 0\nhidden: 64\nheads: 4\n' "field 'layers' is not positive: 0"
bad negative $'family: gpt\nlayers: 2\nhidden: -64\nheads: 4\n' "field 'hidden' is not positive: -64"
bad unknown-family $'family: gpt3\nlayers: 2\n' "unknown model family 'gpt3'" "did you mean 'gpt'?"
bad foreign-field $'family: bert\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\n' "family bert has no 'kv_heads'"
bad missing $'family: llama\nlayers: 2\nhidden: 64\nheads: 4\n' "family llama needs 'ffn'"
bad not-a-map $'- gpt\n' "the top level is not a mapping"
expect missing-file 1 "$LOOM" plan --model-file "$tmp/none.yaml" && contains missing-file-msg "$tmp/none.yaml"

# Bad flags: the flag is named.
expect arch-foreign 1 "$LOOM" plan --arch gpt --layers 2 --hidden 64 --heads 4 --experts 8 &&
  contains arch-foreign-msg "loom: error: model: --arch gpt: family gpt has no --experts" &&
  contains arch-foreign-hint "--positions"
expect arch-heads 1 "$LOOM" plan --arch llama --layers 2 --hidden 64 --heads 6 --ffn 96 &&
  contains arch-heads-msg "--heads 6 does not divide --hidden 64"
expect arch-no-family 1 "$LOOM" plan --model gpt3-125m --hidden 64 &&
  contains arch-no-family-msg "--hidden describes an architecture, but no --arch FAMILY is given"
expect arch-two-sources 1 "$LOOM" plan --model gpt3-125m --arch gpt --layers 2 --hidden 64 --heads 4 &&
  contains arch-two-sources-msg "several models"
expect arch-bad-value 2 "$LOOM" plan --arch gpt --layers 2 --hidden 0 --heads 4 && contains arch-bad-value-msg "option --hidden: is not positive: 0"
expect arch-resnet-depth 1 "$LOOM" graph --arch resnet --layers 34 && contains arch-resnet-depth-msg "--layers 34 is not a bottleneck ResNet depth"

finish
