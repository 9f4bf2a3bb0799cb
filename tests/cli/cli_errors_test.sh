#!/usr/bin/env bash
# Command lines that do not parse (main.cc, usage_error.cc): Loom's error format on stderr (`loom: error:`
# naming the command, option or value, then `hint:`), nothing on stdout, exit 2; a "did you mean" for a
# mistyped command or option; `--help` at any level still exits 0.
source "$(dirname "$0")/cli_lib.sh"

# usage NAME ARGS... : exits 2 with exactly "loom: error: ..." and "hint: ..." on stderr and nothing on stdout.
usage() {
  local name=$1; shift
  expect "$name" 2 "$LOOM" "$@" || return 1
  if [ "$(wc -l <<<"$out")" = 2 ] && [[ "$(sed -n 1p <<<"$out")" == "loom: error: "* ]] &&
     [[ "$(sed -n 2p <<<"$out")" == "hint: "* ]]; then pass=$((pass+1)); else fail "$name-format: not 'loom: error:' then 'hint:'"; fi
  if [ -z "$("$LOOM" "$@" 2>/dev/null)" ]; then pass=$((pass+1)); else fail "$name-stdout: printed on stdout"; fi
  return 0
}

# Commands: unknown, mistyped, missing.
usage unknown-command frobnicate && contains unknown-command-msg "loom: error: unknown command 'frobnicate'" &&
  contains unknown-command-list "hint: the commands are models, graph, ops" &&
  if grep -q "did you mean" <<<"$out"; then fail "unknown-command: suggested a far name"; else pass=$((pass+1)); fi
usage typo-command modles && contains typo-command-hint "hint: did you mean 'models'?"
usage typo-command-case CLUSTERZ && contains typo-command-case-hint "did you mean 'clusters'?"
usage no-command && contains no-command-msg "loom: error: a command is required"
usage root-option --frob && contains root-option-msg "loom: error: unknown option '--frob'"

# Options: unknown (with a suggestion from the command's own options and the inherited --help), stray words.
usage typo-option models --famly gpt && contains typo-option-msg "unknown option '--famly' for \`loom models\`" &&
  contains typo-option-hint "hint: did you mean '--family'?"
usage typo-option-tp plan --model gpt3-125m --tpx 2 && contains typo-option-tp-hint "did you mean '--tp'?"
usage typo-option-eq graph --model=gpt3-125m --layesr=2 && contains typo-option-eq-hint "did you mean '--layers'?"
usage typo-help graph --hlep && contains typo-help-hint "did you mean '--help'?"
usage prefix-option graph --model gpt3-125m --forward && contains prefix-option-hint "did you mean '--forward-only'?"
usage far-option comm --xyzzy 1 && contains far-option-hint "hint: \`loom comm --help\` lists its options"
# An unknown option is reported before a required one it displaced.
usage typo-before-required comm --shape 4 --from "R(1)V(1)D(1)@0" --too "R(1)V(1)D(1)@1" &&
  contains typo-before-required-hint "did you mean '--to'?"
usage stray-word models extra && contains stray-word-msg "unexpected argument 'extra' for \`loom models\`"

# Values: missing, not an integer (spaces, words, exponents), out of range, given twice; required options.
usage missing-value graph --model && contains missing-value-msg "loom: error: option --model needs a value" &&
  contains missing-value-hint "hint: --model takes TEXT"
usage tp-space plan --model gpt3-125m --tp '2 ' && contains tp-space-msg "loom: error: option --tp: '2 ' is not an integer" &&
  contains tp-space-hint "hint: give an integer in [1, 1048576]"
usage tp-word plan --model gpt3-125m --tp abc && contains tp-word-msg "option --tp: 'abc' is not an integer"
usage seq-exponent graph --model gpt3-125m --seq 1e3 && contains seq-exponent-msg "option --seq: '1e3' is not an integer"
usage layers-range graph --model gpt3-125m --layers 0 && contains layers-range-msg "option --layers: '0' is not in range 1 to 1024"
usage layers-twice graph --model gpt3-125m --layers 2 --layers 3 &&
  contains layers-twice-msg "option --layers is given 2 values ('2', '3'), but takes one"
usage required comm --shape 4 --from "R(1)V(1)D(1)@0" && contains required-msg "loom: error: option --to is required" &&
  contains required-hint "hint: --to takes TEXT (Consumer layout"

# Help at every level: the usage text on stdout, exit 0, even beside an unknown option.
expect help-root 0 "$LOOM" --help && contains help-root-usage "Usage" && contains help-root-models "models"
for sub in models graph ops comm verify clusters profile plan compare; do
  expect "help-$sub" 0 "$LOOM" "$sub" --help && contains "help-$sub-usage" "Usage"
done
expect help-short 0 "$LOOM" models -h && contains help-short-usage "--family"
expect help-beside-typo 0 "$LOOM" plan --tpx --help && contains help-beside-typo-usage "Usage"

# Input the command could read but not use stays exit 1 (report()), apart from usage errors.
expect bad-preset 1 "$LOOM" graph --model nosuch-model && contains bad-preset-msg "loom: error: unknown model preset"

finish
