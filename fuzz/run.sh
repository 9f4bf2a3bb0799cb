#!/usr/bin/env bash
# Runs every libFuzzer target of a LOOM_FUZZ build (or the ones named) for SECONDS each, starting from the
# committed corpus fuzz/corpus/<target> (read only: new inputs go to BUILD/fuzz-work/<target>/corpus), and
# fails if any target crashes, hangs (-timeout), leaks or goes over the memory limit. A crash leaves its input
# as BUILD/fuzz-work/<target>/crash-<sha1> (docs/fuzzing.md says how to reproduce and keep it).
#   fuzz/run.sh BUILD SECONDS [TARGET...]
set -u
build=${1:?usage: fuzz/run.sh BUILD SECONDS [TARGET...]}
seconds=${2:?usage: fuzz/run.sh BUILD SECONDS [TARGET...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for source in "$here"/*_fuzz.cc; do name=$(basename "$source" _fuzz.cc); targets+=("$name"); done
fi

# The dictionary of each target's format (libFuzzer takes one); none for binary or free-form inputs.
dict_of() {
  case $1 in
    graph|plan|profile_db|timer_results|iopddl) echo "$here/dict/json.dict" ;;
    cluster|model|constraints) echo "$here/dict/yaml.dict" ;;
    annotation) echo "$here/dict/annotation.dict" ;;
  esac
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
printf '%-14s %8s %10s  %s\n' target seconds executions result
for t in "${targets[@]}"; do
  binary="$build/fuzz/${t}_fuzz"
  if [ ! -x "$binary" ]; then echo "fuzz/run.sh: no $binary (make fuzz builds it)" >&2; exit 2; fi
  work="$build/fuzz-work/$t"
  mkdir -p "$work/corpus"
  rm -f "$work"/crash-* "$work"/timeout-* "$work"/oom-* "$work"/leak-*  # this run's findings only
  dict=$(dict_of "$t")
  start=$(date +%s)
  "$binary" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
            -print_final_stats=1 ${dict:+-dict="$dict"} -artifact_prefix="$work/" \
            "$work/corpus" "$here/corpus/$t" > "$work/log" 2>&1
  status=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' | tail -1)
  result=ok
  if [ $status -ne 0 ]; then
    result="FAILED (exit $status): $(ls "$work"/crash-* "$work"/timeout-* "$work"/oom-* "$work"/leak-* 2>/dev/null | tr '\n' ' ')"
    failed+=("$t")
  fi
  printf '%-14s %8s %10s  %s\n' "$t" $(( $(date +%s) - start )) "${runs:-?}" "$result"
  if [ $status -ne 0 ]; then grep -m1 -A25 -E '^==[0-9]+==ERROR|runtime error|law broken|Timeout|out-of-memory' "$work/log" | sed 's/^/    /'; fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz/run.sh: ${failed[*]} failed; logs in $build/fuzz-work/<target>/log" >&2
  exit 1
fi
