#!/usr/bin/env bash
# Issue 15's acceptance: `loom plan --policy auto` on gpt3-175b, dgx-a100x128 (1024 GPUs), global batch 1536,
# in <= 10 s and < 4 GB; its predicted step no slower than megatron-best's. Prints, per search, the wall
# seconds, the CPU seconds (user + sys: on a busy box the wall time is not the search's own), the peak resident
# memory (GNU time) and the predicted step. LOOM: the binary (default
# build/loom); LOOM_OLD: an older binary whose megatron-best planned every candidate in full, timed beside
# (minutes). JOB=llama3-8b: instead, issue 15's llama3-8b on dgx-h100x8 (64 GPUs), global batch 512, whose
# auto search is to take <= 3 s. Usage: [JOB=llama3-8b] bench/auto_speed.sh [extra `loom plan` flags]
set -euo pipefail
LOOM=${LOOM:-build/loom}
case ${JOB:-gpt3-175b} in
  gpt3-175b) job=(--model gpt3-175b --cluster dgx-a100x128 --global-batch 1536) ;;
  llama3-8b) job=(--model llama3-8b --cluster dgx-h100x8 --global-batch 512) ;;
  *) echo "JOB=$JOB: unknown; use gpt3-175b or llama3-8b" >&2; exit 2 ;;
esac
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {  # run LABEL BINARY POLICY
  local label=$1 binary=$2 policy=$3
  /usr/bin/time -f "%e %M %U %S" -o "$out/time" "$binary" plan "${job[@]}" --policy "$policy" --out "$out/files" "${@:4}" \
    >"$out/stdout" 2>"$out/stderr" || true
  # The last line: GNU time puts "Command exited with non-zero status N" before it when the search fails.
  read -r seconds kib user sys < <(tail -n 1 "$out/time")
  local step search
  # A search that fails prints no step line: its error is shown instead (`|| true`: pipefail and set -e).
  step=$(grep -m1 "step time" "$out/stdout" | sed 's/ *step time *//' || true)
  search=$(grep -m1 "^search" "$out/stdout" | sed 's/^search *//' || true)
  [ -n "$step" ] || search=$(grep -m1 "error" "$out/stderr" || true)
  printf '%-22s %6.2f s wall %6.2f + %4.2f s cpu %5.2f GB  step %-10s %s\n' "$label" "$seconds" "$user" "$sys" \
    "$(echo "$kib / 1048576" | bc -l)" "$step" "$search"
}
echo "${job[*]} ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
run "auto" "$LOOM" auto "$@"
run "megatron-best" "$LOOM" megatron-best "$@"
run "deepspeed-best" "$LOOM" deepspeed-best "$@"
if [ -n "${LOOM_OLD:-}" ]; then run "megatron-best (old)" "$LOOM_OLD" megatron-best "$@"; fi
