#!/usr/bin/env bash
# `loom profile` end to end on this machine's CPU: a shrunk model's ops timed by the Python timer (the
# repository's .venv, made by `make setup`), merged into a database that then prices every sub-op; the
# request / results files for timing on another machine; bad input.
source "$(dirname "$0")/cli_lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
py="$root/.venv/bin/python"
if [ ! -x "$py" ]; then echo "FAIL no $py: run 'make setup' (it creates .venv with torch)"; exit 1; fi
fast=(--repeats 1 --warmup 1)
db="$tmp/db.json"
entries() { "$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(len(d["entries"]), *sorted({e["device"] for e in d["entries"]}))' "$1"; }
field() { grep -o "$1 *[0-9]*" <<<"$out" | grep -o '[0-9]*$' | head -1; }  # the number after a label in $out

# Measure every key of GPT-3 (shrunk) under tp 2 on the CPU.
expect measure 0 "$LOOM" profile --model gpt3-125m --shrink --tp 2 --db "$db" "${fast[@]}"
contains measure-device "device     cpu (torch"
keys=$(grep -o 'keys *[0-9]* distinct' <<<"$out" | grep -o '[0-9]*')
contains measure-all "measured   $keys keys into $db ($keys entries now)"
contains measure-skipped "skipped    0 keys"
contains measure-present "present    0 keys"
out=$(entries "$db"); contains db-entries "$keys cpu"
ls "$tmp" | grep -q '\.tmp' && fail "atomic-save: a temporary file was left beside the database"

# The database now prices every sub-op: nothing left to measure, the file untouched.
cp "$db" "$tmp/before.json"
expect dry-run 0 "$LOOM" profile --model gpt3-125m --shrink --tp 2 --db "$db" --dry-run --device-name cpu
contains dry-run-present "$keys already present, 0 to measure"
cmp -s "$db" "$tmp/before.json" && pass=$((pass+1)) || fail "dry-run: the database changed"

# Another plan shares some keys: those are kept, only the new ones are measured.
expect second-plan 0 "$LOOM" profile --model gpt3-125m --shrink --gpus 1 --db "$db" --device-name cpu "${fast[@]}"
present=$(field "present   "); measured=$(field "measured   ")
[ "${present:-0}" -gt 0 ] && [ "${measured:-0}" -gt 0 ] && pass=$((pass+1)) || fail "second-plan: present '$present', measured '$measured'"
out=$(entries "$db"); contains second-plan-kept "$((keys + measured)) cpu"

# Timing elsewhere: write the requests, run the timer by hand, merge its results.
expect requests 0 "$LOOM" profile --model llama-7b --shrink --tp 2 --db "$tmp/llama.json" --device-name cpu --dry-run \
  --requests "$tmp/req.json"
contains requests-listed "request  rotary_embedding"
llama_keys=$(grep -o 'keys *[0-9]* distinct' <<<"$out" | grep -o '[0-9]*')
expect timer 0 env PYTHONPATH="$root/python" "$py" -m loom_profile "$tmp/req.json" --out "$tmp/res.json" --device cpu \
  --repeats 1 --warmup 1 --min-time 0 --quiet
out=$("$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(len(d["results"]), "unsupported", len(d["unsupported"]))' "$tmp/res.json")
contains timer-all "$llama_keys unsupported 0"
expect merge 0 "$LOOM" profile --model llama-7b --shrink --tp 2 --db "$tmp/llama.json" --results "$tmp/res.json"
contains merge-device "device     cpu (from $tmp/res.json: cpu cpu)"
contains merge-all "measured   $llama_keys keys"
# Results a plan did not ask for are ignored, not stored.
cp "$db" "$tmp/before.json"
expect merge-other 0 "$LOOM" profile --model gpt3-125m --shrink --tp 2 --db "$db" --results "$tmp/res.json"
contains merge-other-ignored "ignored    $llama_keys results not asked for"
cmp -s "$db" "$tmp/before.json" && pass=$((pass+1)) || fail "merge-other: the database changed"

# Bad input: a message naming the input and the fix, a clean non-zero exit, the database untouched.
echo '{"version": 1, "entries": [' > "$tmp/broken.json"
# A traced graph (`--graph`) is profiled as `loom plan --graph` plans it.
expect graph-json 0 "$LOOM" graph --model gpt3-125m --layers 2 --forward-only --batch 8 --seq 64 --dtype f32 --json "$tmp/g.json"
expect graph-dry-run 0 "$LOOM" profile --graph "$tmp/g.json" --policy dp --gpus 2 --db "$tmp/graph.json" --dry-run \
  --device-name cpu && contains graph-dry-run-model "model      $tmp/g.json" && contains graph-dry-run-keys "to measure"
expect broken-db nonzero "$LOOM" profile --model gpt3-125m --shrink --db "$tmp/broken.json" --dry-run --device-name cpu
contains broken-db-msg "broken.json: line 2 column 1: malformed JSON: syntax error"
echo '{"version": 1, "entries": [{"op": "add", "shapes": [[2]], "dtype": "f32", "device": "cpu", "seconds": -1}]}' > "$tmp/negative.json"
expect bad-entry nonzero "$LOOM" profile --model gpt3-125m --shrink --db "$tmp/negative.json" --dry-run --device-name cpu
contains bad-entry-msg "entry 0: \"seconds\" must be positive"
expect no-python nonzero "$LOOM" profile --model gpt3-125m --shrink --db "$tmp/x.json" --python "$tmp/no-such-python"
contains no-python-msg "cannot run the Python interpreter"
contains no-python-hint "make setup"
# A Python that cannot import torch.
cat > "$tmp/python-without-torch" <<EOF
#!/bin/sh
shift 2
exec "$py" -c 'import sys, runpy; sys.modules["torch"] = None; sys.argv[0] = "loom_profile"; runpy.run_module("loom_profile", run_name="__main__")' "\$@"
EOF
chmod +x "$tmp/python-without-torch"
expect no-torch nonzero "$LOOM" profile --model gpt3-125m --shrink --db "$tmp/x.json" --python "$tmp/python-without-torch"
contains no-torch-msg "has no torch"
contains no-torch-hint "make setup"
[ -e "$tmp/x.json" ] && fail "no-torch: a database was written"
echo '{"version": 1, "results": [' > "$tmp/bad-results.json"
expect bad-results nonzero "$LOOM" profile --model gpt3-125m --shrink --db "$tmp/x.json" --results "$tmp/bad-results.json"
contains bad-results-msg "bad-results.json: line 2 column 1: malformed JSON: syntax error"
echo '{"version": 1, "device": {"type": "cpu", "name": "cpu"}, "results": []}' > "$tmp/empty-results.json"
expect empty-results nonzero "$LOOM" profile --model gpt3-125m --shrink --db "$tmp/x.json" --results "$tmp/empty-results.json"
contains empty-results-msg "the timer returned nothing for"
expect no-dir nonzero "$LOOM" profile --model llama-7b --shrink --tp 2 --db "$tmp/no/such/dir/db.json" --results "$tmp/res.json"
contains no-dir-msg "option --db"
expect unknown-model nonzero "$LOOM" profile --model nosuch --db "$tmp/x.json" --dry-run --device-name cpu
contains unknown-model-msg "nosuch"
expect bad-degree nonzero "$LOOM" profile --model gpt3-125m --shrink --tp 3 --db "$tmp/x.json" --dry-run --device-name cpu
expect missing-db nonzero "$LOOM" profile --model gpt3-125m --shrink
finish
