#!/usr/bin/env bash
# `--json` on `loom models` and `loom clusters` (docs/json.md): stdout is one JSON document (python3 -m
# json.tool reads it) with the schema tag and the documented keys, its numbers equal the text table's, each
# cluster entry loads back as a cluster file, and errors still go to stderr with nothing on stdout.
source "$(dirname "$0")/cli_lib.sh"

# json NAME FILE ARGS... : exit 0, stdout (alone) into FILE and valid JSON, nothing on stderr.
json() {
  local name=$1 file=$2; shift 2
  "$LOOM" "$@" >"$file" 2>"$tmp/stderr"; local rc=$?
  out=$(cat "$tmp/stderr")
  if [ "$rc" != 0 ]; then fail "$name: exit $rc"; return 1; fi
  if [ -s "$tmp/stderr" ]; then fail "$name: printed on stderr"; return 1; fi
  if out=$(python3 -m json.tool "$file" 2>&1 >/dev/null); then pass=$((pass+1)); else fail "$name: not JSON"; return 1; fi
}
# py NAME ARGS... (script on stdin): a python3 check that passes when the script exits 0.
py() {
  local name=$1; shift
  if out=$(python3 - "$@" 2>&1); then pass=$((pass+1)); else fail "$name"; fi
}

# `loom models --json`: every preset with the documented keys; the numbers are the table's.
json models "$tmp/models.json" models --json
"$LOOM" models >"$tmp/models.txt"
py models-match "$tmp/models.json" "$tmp/models.txt" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert list(doc) == ["schema", "models"], list(doc)
assert doc["schema"] == "loom.models/1"
keys = ["name", "family", "description", "parameters", "nominal_parameters", "default_batch", "default_seq"]
def human_count(v):  # core/strings.h
    units = ["", "K", "M", "G", "T", "P"]; u = 0
    while abs(v) >= 1000 and u + 1 < len(units): v /= 1000; u += 1
    return f"{v:.0f}" if u == 0 else f"{v:.2f}{units[u]}"
rows = [line.split(None, 6) for line in open(sys.argv[2]).read().splitlines()[1:]]
assert len(rows) == len(doc["models"]) > 20, (len(rows), len(doc["models"]))
for m, row in zip(doc["models"], rows):
    assert list(m) == keys, list(m)
    for k in keys[3:]: assert isinstance(m[k], int) and m[k] > 0, (m["name"], k, m[k])
    assert [m["name"], m["family"], str(m["parameters"]), human_count(m["nominal_parameters"]),
            str(m["default_batch"]), str(m["default_seq"]), m["description"]] == row, (m, row)
PY
json models-family "$tmp/gpt.json" models --family gpt --json
py models-family-only "$tmp/gpt.json" "$tmp/models.json" <<'PY'
import json, sys
gpt, every = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert gpt["models"] == [m for m in every["models"] if m["family"] == "gpt"] and gpt["models"]
PY
"$LOOM" models --json >"$tmp/again.json" 2>/dev/null
if cmp -s "$tmp/models.json" "$tmp/again.json"; then pass=$((pass+1)); else fail "models-deterministic: runs differ"; fi

# `loom clusters --json`: every preset in the cluster-file form; the numbers are the table's.
json clusters "$tmp/clusters.json" clusters --json
"$LOOM" clusters >"$tmp/clusters.txt"
py clusters-match "$tmp/clusters.json" "$tmp/clusters.txt" "$tmp" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert list(doc) == ["schema", "clusters"], list(doc)
assert doc["schema"] == "loom.clusters/1"
link_keys = ["kind", "bandwidth", "latency"]
def link(t): return f"{t['kind']} {t['bandwidth'] / 1e9:.4g} GB/s {t['latency'] * 1e6:.3g} us"
def tf(f): return f"{f / 1e12:.1f}" if f > 0 else "-"
table = {line.split()[0]: line for line in open(sys.argv[2]).read().splitlines()[1:]}
assert len(doc["clusters"]) >= 8
for c in doc["clusters"]:
    assert list(c)[:4] == ["name", "nodes", "gpus_per_node", "gpu"], list(c)
    assert set(c) - {"bridge"} == {"name", "nodes", "gpus_per_node", "gpu", "intra", "inter", "nics_per_node",
                                   "nic_bandwidth", "comm_contention", "host"}, list(c)
    assert list(c["host"]) == ["pcie_bandwidth", "gpus_per_pcie_switch", "cpu_adam_params_per_second",
                               "memory_bytes"], list(c["host"])
    g = c["gpu"]
    assert list(g) == ["name", "peak_bf16", "peak_fp16", "peak_fp32", "memory_bytes", "memory_bandwidth"], list(g)
    assert isinstance(g["memory_bytes"], int) and isinstance(c["nodes"], int)
    for tier in ["intra", "inter"] + (["bridge"] if "bridge" in c else []): assert list(c[tier]) == link_keys
    # The row as loom clusters prints it (clusters_command.cc), from the JSON's numbers.
    row = (f"{c['name']:<16} {str(c['nodes']) + 'x' + str(c['gpus_per_node']):>12} {g['name']:<14} "
           f"{tf(g['peak_bf16']):>7} {tf(g['peak_fp16']):>7} {tf(g['peak_fp32']):>7} "
           f"{g['memory_bytes'] / 2**30:>7.0f} {g['memory_bandwidth'] / 1e12:>8.2f}  {link(c['intra']):<27} "
           f"{link(c['inter']):<27} {link(c['bridge']) if 'bridge' in c else '-'}")
    assert table[c["name"]] == row, (table[c["name"]], row)
    json.dump(c, open(f"{sys.argv[3]}/cluster-{c['name']}.json", "w"))
PY
# Each entry, saved alone, is a cluster file that loads back as the same cluster.
for file in "$tmp"/cluster-*.json; do
  name=$(basename "$file" .json)
  json "$name-reload" "$tmp/$name-reload.json" clusters --file "$file" --json &&
    py "$name-same" "$tmp/$name-reload.json" "$file" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["schema"] == "loom.clusters/1" and doc["clusters"] == [json.load(open(sys.argv[2]))]
PY
done

# Errors: stderr in Loom's format, non-zero exit, nothing on stdout.
quiet_error() {  # quiet_error NAME RC MESSAGE ARGS...
  local name=$1 want=$2 message=$3; shift 3
  expect "$name" "$want" "$LOOM" "$@" && contains "$name-msg" "loom: error: $message"
  if [ -z "$("$LOOM" "$@" 2>/dev/null)" ]; then pass=$((pass+1)); else fail "$name-stdout: printed on stdout"; fi
}
quiet_error models-bad-family 1 "no preset of family 'lama'" models --family lama --json
contains models-bad-family-hint "hint: did you mean 'llama'?"
quiet_error clusters-missing-file 1 "option --file" clusters --file "$tmp/none.json" --json
quiet_error clusters-json-yaml 2 "options --json and --yaml go one at a time" clusters --json --yaml dgx-a100

finish
