#!/usr/bin/env bash
# `loom calibrate` end to end on two tiny plans (1 and 2 processes, seconds): the report's structure, the
# files it writes, the fit again from measured.json; and its bad-input errors. Asserts no timing numbers.
source "$(dirname "$0")/cli_lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
py="$root/.venv/bin/python"
if [ ! -x "$py" ]; then echo "FAIL no $py: run 'make setup' (it creates .venv with torch)"; exit 1; fi
tiny="--arch gpt --layers 1 --hidden 32 --heads 2 --ffn 64 --vocab 64 --seq 16 --batch 4 --dtype f32"
cat > "$tmp/plans.txt" <<PLANS
# two tiny plans
tiny-1 $tiny --gpus 1
tiny-dp2 $tiny --policy dp --gpus 2
PLANS

expect run 0 "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --steps 2 --repeats 2 --out "$tmp/out" --doc "$tmp/calibration.md"
contains run-header "measured ms"
contains run-measured "measured   2 rounds of 2 steps per plan, niceness"
contains run-p2p "p2p_alpha"
contains run-fitted "tiny-1                   1 fit"
contains run-held "tiny-dp2                 2 held-out"
contains run-constants "fit        time_scale"
contains run-note "fitted on 1 plans, fewer than the 5 constants"
contains run-links "reduce_scatter_beta"
contains run-links-measured "(measured)"
contains run-summary "held out   1 plans: median |error|"
contains run-memory "memory     peak per rank"
contains run-wrote "wrote      $tmp/out/cluster.yaml"
for f in out/cluster.yaml out/measured.json calibration.md out/plans/tiny-dp2/rank_1.py; do
  [ -f "$tmp/$f" ] && pass=$((pass+1)) || fail "run: $f missing"
done
expect cluster-reads 0 "$LOOM" clusters --file "$tmp/out/cluster.yaml"
contains cluster-shared "cpu-host-calibrated"
out=$(cat "$tmp/calibration.md"); contains doc-table "| tiny-dp2 | 2 | held out |"
# Every round of every plan is kept, with the load it started at.
out=$("$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); print([(r["name"], len(r["step_s"]), [len(s) for s in r["step_s"]], len(r["load"])) for r in d["runs"]], d["nice"] == 0 or d["nice"] < 0 or d["nice"] > 0)' "$tmp/out/measured.json")
contains measured-rounds "[('tiny-1', 2, [2, 2], 2), ('tiny-dp2', 2, [2, 2], 2)] True"
# The fitted cluster prices a plan as the calibration did.
expect plan-fitted 0 "$LOOM" plan $tiny --gpus 1 --cluster "$tmp/out/cluster.yaml" --fold off

# Fitting again from the measurements runs nothing and prints the same JSON structure.
mkdir "$tmp/again"
expect json 0 "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/again" --measured "$tmp/out/measured.json" --json
json=$("$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/again" --measured "$tmp/out/measured.json" --json 2>/dev/null)
out=$("$py" -c 'import json, sys; d = json.loads(sys.stdin.read()); print(d["schema"], len(d["plans"]), sorted(d["fit"]["constants"]), d["held_out"]["plans"], sorted(d["plans"][1]))' <<<"$json")
contains json-structure "loom.calibrate/1 2 ['all_gather_alpha', 'all_gather_beta', 'alpha', 'beta', 'collective_overhead', 'comm_sharing', 'core_sharing', 'instruction_overhead', 'p2p_alpha', 'p2p_beta', 'reduce_scatter_alpha', 'reduce_scatter_beta', 'time_scale'] 1"
contains json-plan "'measured_s', 'name', 'peak_bytes_measured', 'peak_bytes_predicted', 'peak_error', 'predicted_s', 'processes', 'round_s'"
# Each kind of link was measured apart (python -m loom_profile.cluster) and pinned: the fit moved only the rest.
out=$("$py" -c 'import json, sys; d = json.loads(sys.stdin.read())["fit"]; print(sorted(d["not_fitted"].items()), d["links_world"] >= 2)' <<<"$json")
contains json-measured "[('all_gather_alpha', 'measured'), ('all_gather_beta', 'measured'), ('alpha', 'measured'), ('beta', 'measured'), ('p2p_alpha', 'measured'), ('p2p_beta', 'measured'), ('reduce_scatter_alpha', 'measured'), ('reduce_scatter_beta', 'measured')] True"
[ -d "$tmp/again/plans" ] && fail "json: --measured emitted plans" || pass=$((pass+1))
# Without the links measured (--no-links; an older measured.json), the link constants are fitted, and a kind's
# own link may be fixed by --fix.
"$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); d.pop("links"); json.dump(d, open(sys.argv[2], "w"))' "$tmp/out/measured.json" "$tmp/nolinks.json"
json=$("$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/again" --measured "$tmp/nolinks.json" --fix reduce_scatter_beta=4e8 --json 2>/dev/null)
out=$("$py" -c 'import json, sys; d = json.loads(sys.stdin.read())["fit"]; print(sorted(d["constants"]), d["not_fitted"])' <<<"$json")
contains no-links "['alpha', 'beta', 'collective_overhead', 'comm_sharing', 'core_sharing', 'instruction_overhead', 'p2p_alpha', 'p2p_beta', 'reduce_scatter_beta', 'time_scale'] {'reduce_scatter_beta': 'fixed'}"
printf '{"version": 1, "runs": [], "links": {"p2p": {"alpha_s": 1e-4, "beta_bytes_per_s": 0}}}' > "$tmp/badlink.json"
expect measured-bad-link nonzero "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/bad" --measured "$tmp/badlink.json"
contains measured-bad-link-msg "link 'p2p' is not"
# --fix pins constants at their values; the fit moves the others.
json=$("$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/again" --measured "$tmp/out/measured.json" --fix "time_scale=1.25, p2p_beta=2e9" --json 2>/dev/null)
out=$("$py" -c 'import json, sys; c = json.loads(sys.stdin.read())["fit"]["constants"]; print(c["time_scale"], c["p2p_beta"])' <<<"$json")
contains fix-pinned "1.25 2000000000.0"
expect fix-unknown nonzero "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/again" --measured "$tmp/out/measured.json" --fix speed=2
contains fix-unknown-msg "option --fix: 'speed=2' is not NAME=VALUE of a constant"
expect fix-negative nonzero "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/again" --measured "$tmp/out/measured.json" --fix alpha=-1
contains fix-negative-msg "option --fix: alpha=-1 is not a positive number"

# Bad input. (--measured writes only DIR/cluster.yaml: it does not create --out.)
expect measured-no-out nonzero "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/none" --measured "$tmp/out/measured.json"
contains measured-no-out-msg "create the directory first"
expect fit-too-many nonzero "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 2 --out "$tmp/bad"
contains fit-too-many-msg "option --fit 2: the fit needs at least one plan and one left to predict, of 2"
expect fit-zero nonzero "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 0 --out "$tmp/bad"
expect no-plans-file nonzero "$LOOM" calibrate --plans "$tmp/missing.txt" --fit 1 --out "$tmp/bad"
contains no-plans-file-msg "option --plans"
printf 'one $tiny --gpus 1\none $tiny --gpus 2\n' > "$tmp/dup.txt"
expect duplicate nonzero "$LOOM" calibrate --plans "$tmp/dup.txt" --fit 1 --out "$tmp/bad"
contains duplicate-msg "line 2: plan name 'one' is used twice"
printf -- '--tp 2\n' > "$tmp/noname.txt"
expect no-name nonzero "$LOOM" calibrate --plans "$tmp/noname.txt" --fit 1 --out "$tmp/bad"
contains no-name-msg "is not a name followed by flags"
printf 'a %s --gpus 1 --cluster dgx-a100\nb %s --gpus 1\n' "$tiny" "$tiny" > "$tmp/cluster.txt"
expect plan-cluster nonzero "$LOOM" calibrate --plans "$tmp/cluster.txt" --fit 1 --out "$tmp/bad"
contains plan-cluster-msg "plan 'a': --cluster is set by loom calibrate"
printf 'a %s --gpus 1 --tp\nb %s --gpus 1\n' "$tiny" "$tiny" > "$tmp/dangling.txt"
expect dangling nonzero "$LOOM" calibrate --plans "$tmp/dangling.txt" --fit 1 --out "$tmp/bad"
contains dangling-msg "'--tp' is not a flag with a value"
printf 'a %s --gpus 1 --frobnicate 3\nb %s --gpus 1\n' "$tiny" "$tiny" > "$tmp/unknown.txt"
expect unknown-flag nonzero "$LOOM" calibrate --plans "$tmp/unknown.txt" --fit 1 --out "$tmp/bad"
contains unknown-flag-msg "plan 'a'"
printf 'a %s --gpus 1 --layers 3\nb %s --gpus 1\n' "$tiny" "$tiny" > "$tmp/twice.txt"
expect flag-twice nonzero "$LOOM" calibrate --plans "$tmp/twice.txt" --fit 1 --out "$tmp/bad"
contains flag-twice-msg "plan 'a': --layers is given twice"
# The default set's lines are `loom plan` flags as they stand: none gives a flag twice (gpt-pp4 gave --layers twice).
out=$("$LOOM" calibrate --list | awk '{ delete seen; for (i = 2; i <= NF; i++) if ($i ~ /^--/ && seen[$i]++) print $1, $i }')
[ -z "$out" ] && pass=$((pass+1)) || fail "list: a flag given twice: $out"
out=$("$LOOM" calibrate --list | grep '^gpt-pp4 '); contains list-pp4-layers "--arch gpt --layers 4 --hidden 256"
printf '{"version": 1, "runs": [{"name": "tiny-1", "step_s": [0.1], "peak_bytes": [1]}]}' > "$tmp/short.json"
expect measured-missing nonzero "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/bad" --measured "$tmp/short.json"
contains measured-missing-msg "has no run of plan 'tiny-dp2'"
# A plan's step is its fastest round's (each round: the median after the first step); a flat step_s is one round.
printf '{"version": 1, "runs": [{"name": "tiny-1", "step_s": [[9, 0.3, 0.1, 0.2], [9, 0.05, 0.5, 0.6]], "peak_bytes": [1]}, {"name": "tiny-dp2", "step_s": [9, 0.4, 0.2, 0.3], "peak_bytes": [1, 1]}]}' > "$tmp/rounds.json"
json=$("$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/again" --measured "$tmp/rounds.json" --json 2>/dev/null)
out=$("$py" -c 'import json, sys; d = json.loads(sys.stdin.read()); print([(p["measured_s"], p["round_s"]) for p in d["plans"]], d["rounds"])' <<<"$json")
contains measured-fastest-round "[(0.2, [0.2, 0.5]), (0.3, [0.3])] 2"
printf '{"version": 1, "runs": [{"name": "tiny-1", "step_s": [[0.1], []], "peak_bytes": [1]}]}' > "$tmp/empty-round.json"
expect measured-empty-round nonzero "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/bad" --measured "$tmp/empty-round.json"
contains measured-empty-round-msg "plan 'tiny-1' has a round without step times"
printf '{"version": 1, "runs": [{"name": "tiny-1", "step_s": [-1], "peak_bytes": [1]}]}' > "$tmp/negative.json"
expect measured-negative nonzero "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/bad" --measured "$tmp/negative.json"
contains measured-negative-msg "step time that is not a positive number"
expect measured-not-json nonzero "$LOOM" calibrate --plans "$tmp/plans.txt" --fit 1 --out "$tmp/bad" --measured "$tmp/plans.txt"
contains measured-not-json-msg "is not a plan runs file"
expect steps-one 2 "$LOOM" calibrate --plans "$tmp/plans.txt" --steps 1
expect repeats-zero 2 "$LOOM" calibrate --plans "$tmp/plans.txt" --repeats 0
finish
