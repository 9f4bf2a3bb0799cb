#!/usr/bin/env bash
# All-or-nothing output sets (docs/files.md; issue 17 "Outputs"): a failed command leaves the previous files
# as they were and no staging directory; targets must be regular files; a file-size limit is an error; the
# output directory is locked while a set is written.
source "$(dirname "$0")/cli_lib.sh"

small=(--model gpt3-125m --layers 2 --seq 256 --global-batch 8 --gpus 4)
files=(plan.json exec.json trace.json report.html)

# The previous set: plan files and rank programs, their checksums kept to compare after each failure.
expect first-set 0 "$LOOM" plan "${small[@]}" --policy dp --out "$tmp/o" --emit "$tmp/e"
before=$(cd "$tmp" && md5sum o/* e/*)
plan_before=$(md5sum < "$tmp/o/plan.json")
unchanged() {  # unchanged NAME: the previous set is byte for byte in place and nothing else is there
  if [ "$(cd "$tmp" && md5sum o/* e/*)" = "$before" ] && [ -z "$(ls -A "$tmp/o" "$tmp/e" | grep -F .loom-staging)" ]; then
    pass=$((pass+1)); else fail "$1: the previous set changed or a staging directory was left"; fi
}

# --fold on with --emit: the emit is refused before any report file is replaced (it wrote 4 files before).
expect fold-emit nonzero "$LOOM" plan "${small[@]}" --policy megatron --tp 2 --dp 2 --fold on --out "$tmp/o" --emit "$tmp/e" &&
  contains fold-emit-msg "--emit needs every rank's program"
unchanged fold-emit

# An output name that is a directory: refused naming it, the files before it in the set untouched.
mv "$tmp/o/trace.json" "$tmp/trace.keep" && mkdir "$tmp/o/trace.json"
expect dir-target nonzero "$LOOM" plan "${small[@]}" --policy megatron --tp 2 --out "$tmp/o" &&
  contains dir-target-msg "$tmp/o/trace.json: refusing to write trace.json over a directory"
rmdir "$tmp/o/trace.json" && mv "$tmp/trace.keep" "$tmp/o/trace.json"
unchanged dir-target

# An --emit failure (manifest.json is a directory) leaves neither new programs nor new reports.
mv "$tmp/e/manifest.json" "$tmp/manifest.keep" && mkdir "$tmp/e/manifest.json"
expect emit-fails nonzero "$LOOM" plan "${small[@]}" --policy megatron --tp 2 --out "$tmp/o" --emit "$tmp/e" &&
  contains emit-fails-msg "manifest.json: refusing to write manifest.json over a directory"
rmdir "$tmp/e/manifest.json" && mv "$tmp/manifest.keep" "$tmp/e/manifest.json"
unchanged emit-fails

# A symlink or a FIFO target is refused naming it; the file it points to is not touched.
echo keep > "$tmp/victim"
mv "$tmp/o/plan.json" "$tmp/plan.keep" && ln -s "$tmp/victim" "$tmp/o/plan.json"
expect symlink-target nonzero "$LOOM" plan "${small[@]}" --policy megatron --tp 2 --out "$tmp/o" &&
  contains symlink-target-msg "$tmp/o/plan.json: refusing to write plan.json over a symbolic link to '$tmp/victim'"
[ "$(cat "$tmp/victim")" = keep ] && pass=$((pass+1)) || fail "symlink-target: the link's target was written"
rm "$tmp/o/plan.json" && mkfifo "$tmp/o/plan.json"
expect fifo-target nonzero "$LOOM" plan "${small[@]}" --policy megatron --tp 2 --out "$tmp/o" &&
  contains fifo-target-msg "$tmp/o/plan.json: refusing to write plan.json over a FIFO"
rm "$tmp/o/plan.json" && mv "$tmp/plan.keep" "$tmp/o/plan.json"
unchanged special-targets
expect graph-device-target nonzero "$LOOM" graph --model gpt3-125m --layers 1 --json /dev/null &&
  contains graph-device-target-msg "/dev/null: refusing to write the graph over a character device"

# A file-size limit (ulimit -f, 1 KiB blocks): an error naming the file, not death by SIGXFSZ (exit 153).
expect size-limit nonzero bash -c "ulimit -f 64 && exec \"\$0\" \"\$@\"" "$LOOM" plan "${small[@]}" --policy megatron --tp 2 \
  --out "$tmp/o" --emit "$tmp/e" && contains size-limit-msg "failed: File too large" &&
  contains size-limit-hint "file-size limit (ulimit -f)"
unchanged size-limit

# The lock: while another process holds the output directory's lock, loom waits, then writes its whole set.
( flock "$tmp/o" sleep 1 ) & holder=$!
sleep 0.2
expect lock-wait 0 "$LOOM" plan "${small[@]}" --policy megatron --tp 2 --out "$tmp/o"
wait "$holder"
[ "$(md5sum < "$tmp/o/plan.json")" != "$plan_before" ] && pass=$((pass+1)) || fail "lock-wait: the new set is not in place"

# A re-emit with fewer ranks removes the earlier emit's programs beyond them (the manifest lists 2 of 4).
expect fewer-ranks 0 "$LOOM" plan --model gpt3-125m --layers 2 --seq 256 --global-batch 8 --gpus 2 --policy dp \
  --out "$tmp/o" --emit "$tmp/e"
[ "$(cd "$tmp/e" && ls rank_*.py | tr '\n' ' ')" = "rank_0.py rank_1.py " ] && pass=$((pass+1)) ||
  fail "fewer-ranks: stale rank programs left: $(ls "$tmp/e")"

finish
