#!/usr/bin/env bash
# End-to-end checks of the `loom` command line: exit codes, key output, JSON round trips, bad input.
source "$(dirname "$0")/cli_lib.sh"

# Commands and help.
expect ops 0 "$LOOM" ops && contains ops-matmul "matmul"
expect no-subcommand nonzero "$LOOM"
for sub in models graph ops; do expect "help-$sub" 0 "$LOOM" "$sub" --help && contains "help-$sub-usage" "Usage"; done

# Presets.
expect models 0 "$LOOM" models --family gpt && contains models-175b "gpt3-175b"
expect models-bad-family nonzero "$LOOM" models --family nosuch && contains models-bad-family-msg "no preset of family 'nosuch'"

# Graph summary of a preset.
expect graph 0 "$LOOM" graph --model gpt3-125m --batch 2 --seq 256
contains graph-forward "forward"
contains graph-backward "backward"
contains graph-optimizer "optimizer"
contains graph-params "parameters"

# JSON round trip: build -> write -> read -> write gives byte-identical files.
expect json-write 0 "$LOOM" graph --model gpt3-125m --batch 2 --seq 128 --layers 2 --json "$tmp/a.json"
expect json-read 0 "$LOOM" graph --from "$tmp/a.json" --json "$tmp/b.json"
if cmp -s "$tmp/a.json" "$tmp/b.json"; then pass=$((pass+1)); else fail "json-round-trip: files differ"; fi

# Bad input: clear message, non-zero exit, no crash, no half-written output.
expect unknown-preset nonzero "$LOOM" graph --model nosuch-model && contains unknown-preset-msg "unknown model preset 'nosuch-model'"
expect both-sources nonzero "$LOOM" graph --model gpt3-125m --from "$tmp/a.json"
expect missing-file nonzero "$LOOM" graph --from "$tmp/none.json" && contains missing-file-msg "none.json"
head -c 500 "$tmp/a.json" > "$tmp/truncated.json"
expect truncated-json nonzero "$LOOM" graph --from "$tmp/truncated.json" && contains truncated-json-msg "truncated.json"
sed 's/"type":"layer_norm"/"type":"no_such_op"/' "$tmp/a.json" > "$tmp/unknown-op.json"
expect unknown-op nonzero "$LOOM" graph --from "$tmp/unknown-op.json" && contains unknown-op-msg "no_such_op"
# A recorded shape that contradicts the op's annotation (tensor 3 is the token embedding's output).
sed '/{"id":3,/s/"shape":\[2,128,768\]/"shape":[2,128,769]/' "$tmp/a.json" > "$tmp/bad-shape.json"
if cmp -s "$tmp/a.json" "$tmp/bad-shape.json"; then fail "bad-shape: the edit did not apply"; fi
expect bad-shape nonzero "$LOOM" graph --from "$tmp/bad-shape.json" && contains bad-shape-msg "[2, 128, 769]"
expect fwd-json 0 "$LOOM" graph --model gpt3-125m --batch 2 --seq 128 --layers 2 --forward-only --json "$tmp/f.json"
sed '/{"id":3,/s/"shape":\[2,128,768\]/"shape":[2,128,769]/' "$tmp/f.json" > "$tmp/f-bad.json"
expect annotation-shape nonzero "$LOOM" graph --from "$tmp/f-bad.json" && contains annotation-shape-msg "recorded shape [2, 128, 769], but the inputs give [2, 128, 768]"
expect bad-dtype nonzero "$LOOM" graph --model gpt3-125m --dtype f13 && contains bad-dtype-msg "unknown dtype 'f13'"
expect bad-batch nonzero "$LOOM" graph --model gpt3-125m --batch -3
expect bad-json-dir nonzero "$LOOM" graph --model gpt3-125m --layers 1 --batch 1 --seq 64 --json "$tmp/no/such/dir/g.json"
if [ -e "$tmp/no/such/dir/g.json" ]; then fail "bad-json-dir: wrote a file"; else pass=$((pass+1)); fi

# `loom comm`: RVD search between layouts, text and JSON, bad layouts and clusters.
expect comm 0 "$LOOM" comm --shape 1048576 --from "R(1)V(8)D(1)@0-7" --to "R(1)V(1)D(8)@8-15" --cluster v100x8x2
contains comm-reduce-scatter "V->D reduce-scatter"
contains comm-time "predicted time"
contains comm-baseline "p2p baseline"
contains comm-tiers "infiniband"
expect comm-json 0 "$LOOM" comm --shape 1048576 --from "R(1)V(8)D(1)@0-7" --to "R(1)V(1)D(8)@8-15" --cluster v100x8x2 --dtype f32 --json
contains comm-json-baseline '"p2p_baseline_time_s"'
contains comm-json-steps '"rule": "V->D reduce-scatter"'
expect comm-help 0 "$LOOM" comm --help && contains comm-help-usage "Usage"
expect comm-bad-product nonzero "$LOOM" comm --shape 1024 --from "R(1)V(8)D(2)@0-7" --to "R(1)V(1)D(8)@8-15"
contains comm-bad-product-msg "loom: error: option --from: layout R(1)V(8)D(2)@0-7: R·V·D = 16 but 8 devices"
expect comm-indivisible nonzero "$LOOM" comm --shape 1000 --from "R(1)V(1)D(16)@0-15" --to "R(1)V(1)D(8)@0-7"
contains comm-indivisible-msg "not divisible by D factor 16"
expect comm-bad-cluster nonzero "$LOOM" comm --shape 1024 --from "R(1)V(8)D(1)@0-7" --to "R(1)V(1)D(8)@8-15" --cluster tpu-v4
contains comm-bad-cluster-msg "unknown cluster 'tpu-v4'"
expect comm-device-outside nonzero "$LOOM" comm --shape 1024 --from "R(1)V(8)D(1)@0-7" --to "R(1)V(1)D(8)@8-15" --cluster v100x8
contains comm-device-outside-msg "device 8 is not in cluster 'v100x8'"
expect comm-bad-shape nonzero "$LOOM" comm --shape 10x2 --from "R(1)V(1)D(1)@0" --to "R(1)V(1)D(1)@1"

# `loom comm` limits: each case must end, cleanly. Under `timeout`, a hang is killed and exits 137, which
# `expect` counts as a failure (not as a clean non-zero exit).
limit() { if command -v timeout >/dev/null; then timeout -s KILL --preserve-status 30 "$@"; else "$@"; fi; }
# 274177 · 67280421310721 wrapped to 1 and the search never ended.
expect comm-factor-overflow nonzero limit "$LOOM" comm --shape 8 --from "R(274177)V(67280421310721)D(1)@0" --to "R(1)V(1)D(1)@1" --cluster v100x8x2
contains comm-factor-overflow-msg "option --from: layout R(274177)V(67280421310721)D(1)@0: R·V·D overflows"
expect comm-shape-too-big nonzero limit "$LOOM" comm --shape 4294967296,4294967296 --from "R(1)V(1)D(1,1)@0" --to "R(1)V(1)D(1,1)@1"
contains comm-shape-too-big-msg "more than 2^48 elements"
expect comm-shape-zero nonzero "$LOOM" comm --shape 8,0 --from "R(1)V(1)D(1,1)@0" --to "R(1)V(1)D(1,1)@1"
contains comm-shape-zero-msg "bad dimension '0'"
expect comm-device-over-int nonzero "$LOOM" comm --shape 8 --from "R(1)V(1)D(1)@4294967296" --to "R(1)V(1)D(1)@1"
contains comm-device-over-int-msg "device 4294967296 is out of range"
expect comm-device-max-int nonzero "$LOOM" comm --shape 8 --from "R(1)V(1)D(1)@2147483647" --to "R(1)V(1)D(1)@1" --cluster v100x8x2
contains comm-device-max-int-msg "device 2147483647 is not in cluster 'v100x8x2' (16 devices"
# Past the search budget: the best path found so far and a note, never a hang (small budget; the default stops D(256) in ~3 s).
expect comm-budget 0 limit "$LOOM" comm --shape 1024,1024 --from "R(1)V(1)D(16,1)@0-15" --to "R(16)V(1)D(1,1)@0-15" --cluster v100x8x2 --max-states 50
contains comm-budget-note "note: the search stopped early"
expect comm-budget-json 0 limit "$LOOM" comm --shape 1024,1024 --from "R(1)V(1)D(16,1)@0-15" --to "R(16)V(1)D(1,1)@0-15" --cluster v100x8x2 --max-states 50 --json
contains comm-budget-json-flag '"stopped_early": true'
expect comm-budget-bad nonzero "$LOOM" comm --shape 8 --from "R(1)V(1)D(1)@0" --to "R(1)V(1)D(1)@1" --max-states 0

# Option bounds: clean errors instead of wrapped sizes or runaway builds.
expect huge-batch nonzero "$LOOM" graph --model gpt3-125m --batch 9223372036854775807 && contains huge-batch-msg "not in range"
expect zero-layers nonzero "$LOOM" graph --model gpt3-125m --layers 0
expect deep-layers nonzero "$LOOM" graph --model gpt3-125m --layers 100000
expect integer-dtype nonzero "$LOOM" graph --model gpt3-125m --dtype i64 && contains integer-dtype-msg "not a floating type"

# `loom verify` (issue 3): shrunk GPT, Swin, T5, AlphaFold2 and MoE under DP, TP, DP x TP and a 2-stage
# pipeline, each materialized, checked and run on simulated devices against one device (rel 1e-9).
for model in gpt3-125m swin-1.8b t5-3.9b alphafold2-87m moe-380m; do
  for policy in dp tp dp-tp pp; do
    devices=2; [ "$policy" = dp-tp ] && devices=4
    expect "verify-$model-$policy" 0 "$LOOM" verify --model "$model" --policy "$policy" --devices "$devices" &&
      contains "verify-$model-$policy-pass" "result     PASS"
  done
done
expect verify-gpipe 0 "$LOOM" verify --model gpt3-125m --policy pp --devices 2 --schedule gpipe && contains verify-gpipe-pass "PASS"
expect verify-megatron 0 "$LOOM" verify --model llama3-8b --policy megatron --dp 2 --tp 2 --pp 2 --microbatches 2 &&
  contains verify-megatron-pass "PASS" && contains verify-megatron-devices "on 8 devices"
expect verify-fallback 0 "$LOOM" verify --model gpt3-125m --policy dp-tp --devices 4 --fallback-only &&
  contains verify-fallback-sends "collectives: none"
expect verify-bad-policy nonzero "$LOOM" verify --model gpt3-125m --policy zero9 && contains verify-bad-policy-msg "dp, tp"
expect verify-bad-model nonzero "$LOOM" verify --model nosuch --policy dp
expect verify-bad-degrees nonzero "$LOOM" verify --model gpt3-125m --policy megatron --dp 2 --tp 2 --devices 8 &&
  contains verify-bad-degrees-msg "uses 4 GPUs, but the job has 8"
expect verify-bad-schedule nonzero "$LOOM" verify --model gpt3-125m --policy pp --schedule zigzag
expect verify-indivisible nonzero "$LOOM" verify --model gpt3-125m --policy dp --devices 3

# `loom clusters` (issue 4): the preset table, a preset written as a cluster file and read back, a file
# given to --cluster, and bad files (clean non-zero exits naming the file and the field).
expect clusters 0 "$LOOM" clusters && contains clusters-a100 "dgx-a100" && contains clusters-h100 "H100-SXM-80GB" &&
  contains clusters-bridge "nvlink 56.25 GB/s"
expect clusters-yaml 0 "$LOOM" clusters --yaml dgx-a100 && contains clusters-yaml-kind "kind: nvswitch"
printf '%s\n' "$out" > "$tmp/a100.yaml"
expect clusters-file 0 "$LOOM" clusters --file "$tmp/a100.yaml" && contains clusters-file-row "A100-SXM-80GB" &&
  contains clusters-file-devices "8 devices"
expect clusters-yaml-nodes 0 "$LOOM" clusters --yaml dgx-a100x2 && contains clusters-yaml-nodes-2 "nodes: 2"
printf '%s\n' "$out" > "$tmp/a100x2.yaml"
expect comm-cluster-file 0 "$LOOM" comm --shape 1024,1024 --from "R(1)V(8)D(1,1)@0-7" --to "R(1)V(1)D(8,1)@8-15" --cluster "$tmp/a100x2.yaml"
comm_file_out=$out
expect comm-cluster-preset 0 "$LOOM" comm --shape 1024,1024 --from "R(1)V(8)D(1,1)@0-7" --to "R(1)V(1)D(8,1)@8-15" --cluster dgx-a100x2
if [ "$(sed 1d <<<"$comm_file_out")" = "$(sed 1d <<<"$out")" ]; then pass=$((pass+1)); else fail "comm-cluster-file: plan differs from the preset's"; fi
printf 'name: x\nnodes: [1\n' > "$tmp/bad.yaml"
expect clusters-malformed nonzero "$LOOM" clusters --file "$tmp/bad.yaml" && contains clusters-malformed-msg "malformed YAML"
expect comm-malformed nonzero "$LOOM" comm --shape 8 --from "R(1)V(1)D(1)@0" --to "R(1)V(1)D(1)@1" --cluster "$tmp/bad.yaml" &&
  contains comm-malformed-msg "loom: error: option --cluster: cluster file"
sed 's/^nodes: 2/nodes: -2/' "$tmp/a100x2.yaml" > "$tmp/neg.yaml"
expect clusters-negative nonzero "$LOOM" clusters --file "$tmp/neg.yaml" && contains clusters-negative-msg "field 'nodes' is negative"
sed 's/kind: nvswitch/kind: ethernet/' "$tmp/a100x2.yaml" > "$tmp/kind.yaml"
expect clusters-bad-kind nonzero "$LOOM" clusters --file "$tmp/kind.yaml" && contains clusters-bad-kind-msg "unknown link kind 'ethernet'"
expect clusters-missing nonzero "$LOOM" clusters --file "$tmp/none.yaml" && contains clusters-missing-msg "no such file"
expect clusters-bad-preset nonzero "$LOOM" clusters --yaml nosuch && contains clusters-bad-preset-msg "unknown cluster 'nosuch'"

finish
