#!/usr/bin/env bash
# `loom solve-iopddl`: the contest's example solved to its optimum, the solution file, the JSON summary,
# and clean errors for bad input.
source "$(dirname "$0")/cli_lib.sh"
example="$(dirname "$0")/../search/data/example.json"  # the contest's example, copied from ../shared/benchmarks

expect "example" 0 "$LOOM" solve-iopddl "$example" --iterations 200
contains "example cost" "cost        445"
contains "example peak" "peak usage  50 of 50 (100.00 %)"
contains "example strategies" "strategies  [0, 0, 2, 1, 0]"
contains "example proven" "proven optimal"

expect "solution file" 0 "$LOOM" solve-iopddl "$example" --iterations 200 --out "$tmp/solution.json"
[ "$(cat "$tmp/solution.json")" = "[0, 0, 2, 1, 0]" ] && pass=$((pass+1)) || fail "solution file: $(cat "$tmp/solution.json")"

expect "json" 0 "$LOOM" solve-iopddl "$example" --iterations 200 --json
contains "json cost" '"cost": 445'
contains "json limit" '"usage_limit": 50'
contains "json stages" '"name": "presolve"'
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["strategies"] == [0, 0, 2, 1, 0], d' "$out" \
  && pass=$((pass+1)) || fail "json: not the summary"

expect "missing file" nonzero "$LOOM" solve-iopddl "$tmp/absent.json"
contains "missing file names it" "absent.json: cannot read the IOPDDL instance: no such file"
expect "directory" nonzero "$LOOM" solve-iopddl "$tmp"
contains "directory" "not a regular file"
echo '{"problem": {"nodes": {"intervals": [[0, 1]], "costs": [["a"]], "usages": [[1]]}, "edges": {"nodes": [], "costs": []}}}' > "$tmp/bad.json"
expect "bad field" nonzero "$LOOM" solve-iopddl "$tmp/bad.json"
contains "bad field named" "problem.nodes.costs[0][0] must be an integer"
sed 's/"usage_limit": 50/"usage_limit": 20/' "$example" > "$tmp/tight.json"
expect "infeasible" nonzero "$LOOM" solve-iopddl "$tmp/tight.json" --iterations 10
contains "infeasible says why" "no choice fits the usage limit of 20"
expect "bad timeout" 2 "$LOOM" solve-iopddl "$example" --timeout -1
expect "no output on error" nonzero "$LOOM" solve-iopddl "$tmp/tight.json" --iterations 10 --out "$tmp/none.json"
[ ! -e "$tmp/none.json" ] && pass=$((pass+1)) || fail "a solution was written for an infeasible instance"
finish
