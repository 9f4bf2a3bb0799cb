# Sourced by every tests/cli/*_test.sh: $LOOM, a temporary directory, and the expect / contains checks.
# A script ends with `finish`, which prints the tally and fails when any check failed.
set -u
LOOM=${LOOM:?set LOOM to the loom binary}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
pass=0
fail() { echo "FAIL $1"; [ -n "${out:-}" ] && echo "$out" | head -20; failures=$((failures+1)); }
expect() {  # expect NAME EXPECTED_RC COMMAND... ; output in $out
  local name=$1 want=$2; shift 2
  out=$("$@" 2>&1); local rc=$?
  if [ "$want" = nonzero ]; then [ "$rc" != 0 ] && [ "$rc" -lt 128 ] || { fail "$name: exit $rc, want a clean non-zero exit"; return 1; }
  elif [ "$rc" != "$want" ]; then fail "$name: exit $rc, want $want"; return 1; fi
  pass=$((pass+1)); return 0
}
contains() {  # contains NAME TEXT ; checks $out
  if grep -qF -- "$2" <<<"$out"; then pass=$((pass+1)); else fail "$1: output lacks '$2'"; fi
}

finish() { echo "$pass passed, $failures failed"; [ "$failures" = 0 ]; }
