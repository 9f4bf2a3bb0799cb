#!/usr/bin/env bash
# End-to-end checks of the `loom` command line: exit codes and key output.
set -u
LOOM=${LOOM:?set LOOM to the loom binary}
failures=0
pass=0
expect() {  # expect NAME EXPECTED_RC COMMAND... ; output in $out
  local name=$1 want=$2; shift 2
  out=$("$@" 2>&1); local rc=$?
  if [ "$rc" != "$want" ]; then echo "FAIL $name: exit $rc, want $want"; echo "$out" | head -20; failures=$((failures+1)); return 1; fi
  pass=$((pass+1)); return 0
}
contains() {  # contains NAME TEXT ; checks $out
  if ! grep -qF -- "$2" <<<"$out"; then echo "FAIL $1: output lacks '$2'"; echo "$out" | head -20; failures=$((failures+1)); else pass=$((pass+1)); fi
}

expect ops 0 "$LOOM" ops && contains ops-matmul "matmul"
expect no-subcommand 106 "$LOOM"

echo "$pass passed, $failures failed"
[ "$failures" = 0 ]
