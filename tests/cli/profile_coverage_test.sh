#!/usr/bin/env bash
# The op timer covers the op types of the model zoo: the shrunk presets' requests (LLaMA with grouped-query
# attention, T5, BERT, Swin, ResNet, UNet, MoE; GPT is in profile_test.sh) all run through torch on the
# CPU, except the MoE gate, which the timer lists as unsupported and `loom profile` reports as skipped.
source "$(dirname "$0")/cli_lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
py="$root/.venv/bin/python"
if [ ! -x "$py" ]; then echo "FAIL no $py: run 'make setup' (it creates .venv with torch)"; exit 1; fi

models=(llama2-70b t5-3.9b bert-large swin-1.8b resnet-50 unet-33m moe-380m)
for m in "${models[@]}"; do
  expect "requests-$m" 0 "$LOOM" profile --model "$m" --shrink --tp 2 --db "$tmp/$m.json" --device-name cpu --dry-run \
    --requests "$tmp/req-$m.json"
done
# One timer run over the union of the requests (keys repeat across models).
"$py" - "$tmp" "${models[@]}" <<'PY'
import json, sys
tmp, models = sys.argv[1], sys.argv[2:]
requests = {}
for m in models:
    for r in json.load(open(f"{tmp}/req-{m}.json"))["requests"]:
        requests.setdefault(json.dumps(r["key"], sort_keys=True), r)
json.dump({"version": 1, "device": "cpu", "timing": {}, "requests": list(requests.values())}, open(f"{tmp}/all.json", "w"))
PY
expect timer 0 env PYTHONPATH="$root/python" "$py" -m loom_profile "$tmp/all.json" --out "$tmp/res.json" --device cpu \
  --repeats 1 --warmup 1 --min-time 0 --quiet
out=$("$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("unsupported ops:", sorted({u["key"]["op"] for u in d["unsupported"]}))
print("timed:", len(d["results"]), "all positive:", all(r["seconds"] > 0 for r in d["results"]))' "$tmp/res.json")
contains only-moe-gate "unsupported ops: ['moe_gate', 'moe_gate/backward']"
contains all-positive "all positive: True"
for m in "${models[@]}"; do
  expect "merge-$m" 0 "$LOOM" profile --model "$m" --shrink --tp 2 --db "$tmp/$m.json" --results "$tmp/res.json"
done
contains moe-skipped "skipped    2 keys:"
contains moe-skipped-why "moe_gate"
finish
