#!/usr/bin/env bash
# `loom plan --trace-devices`: trace.json draws one track per device class by default, every device or a
# list on request; a device outside the plan is an error that writes nothing.
source "$(dirname "$0")/cli_lib.sh"

small=(--model gpt3-125m --layers 2 --seq 256 --global-batch 8 --policy dp --gpus 4)
processes() { python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["traceEvents"]
print(";".join(e["args"]["name"] for e in t if e["name"]=="process_name"))' "$1"; }

expect classes 0 "$LOOM" plan "${small[@]}" --out "$tmp/c" && out=$(processes "$tmp/c/trace.json") &&
  contains classes-one-track "class 0: device 0 (for devices 0-3)"
expect all 0 "$LOOM" plan "${small[@]}" --trace-devices all --out "$tmp/a" && out=$(processes "$tmp/a/trace.json") &&
  contains all-device-3 "device 3 (the times of its class representative 0)"
[ "$(echo "$out" | tr ';' '\n' | wc -l)" = 4 ] && pass=$((pass+1)) || fail "all: want 4 tracks, got '$out'"
expect listed 0 "$LOOM" plan "${small[@]}" --trace-devices 1,3 --out "$tmp/l" && out=$(processes "$tmp/l/trace.json") &&
  [ "$out" = "device 1 (the times of its class representative 0);device 3 (the times of its class representative 0)" ] &&
  pass=$((pass+1)) || fail "listed: got '$out'"
expect out-of-range nonzero "$LOOM" plan "${small[@]}" --trace-devices 0,9 --out "$tmp/x" &&
  contains out-of-range-msg "option --trace-devices: device 9 is not in the plan, which has 4 devices"
if [ ! -e "$tmp/x/trace.json" ]; then pass=$((pass+1)); else fail "out-of-range wrote $tmp/x/trace.json"; fi
expect bad-text nonzero "$LOOM" plan "${small[@]}" --trace-devices some --out "$tmp/y" &&
  contains bad-text-msg "'some' is not a device id"

finish
