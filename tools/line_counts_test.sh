#!/usr/bin/env bash
# tools/line_counts.sh --check holds the core to its budget: it passes on the repository's own budget file, and
# fails, naming the reason, when the core is one line over its budget, when a core folder holds files named
# after a wing, when a core file mentions a wing's name, and when the afternoon path names a file that does
# not exist. (The examples' part needs Bazel
# itself and runs in CI as `tools/line_counts.sh --check`; here it is skipped with LINE_COUNTS_NO_QUERY.)
set -uo pipefail
budget_in_runfiles="$TEST_SRCDIR/${TEST_WORKSPACE:-tinyddp}/tools/line_budget.txt"
cd "$(dirname "$(readlink -f "$budget_in_runfiles")")/.." || exit 2
export LINE_COUNTS_NO_QUERY=1
failures=0
expect() {  # expect STATUS TEXT BUDGET_FILE: --check exits with STATUS and prints TEXT
  local want=$1 text=$2 file=$3 out rc
  out=$(LINE_BUDGET=$file tools/line_counts.sh --check 2>&1); rc=$?
  if [[ $rc != "$want" ]] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL: with $(basename "$file"): wanted exit $want and \"$text\", got exit $rc:"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok: exit $rc, \"$text\""
  fi
}
tmp=${TEST_TMPDIR:-$(mktemp -d)}

expect 0 "every budget holds" tools/line_budget.txt

core_lines=$(LINE_BUDGET=tools/line_budget.txt tools/line_counts.sh --check | sed -nE 's/^core \([0-9]+ files\) +([0-9]+) lines.*/\1/p')
[[ -n $core_lines ]] || { echo "FAIL: no core line in the output"; exit 1; }
sed -E "s/^core_budget .*/core_budget $((core_lines - 1))/" tools/line_budget.txt >"$tmp/one_over.txt"
expect 1 "the core is over its budget by" "$tmp/one_over.txt"

sed -E "s#^core (.*)#core \1 dist/parallel#; s/^core_budget .*/core_budget 1000000/" tools/line_budget.txt >"$tmp/wing_in_core.txt"
expect 1 "core files are named after a wing" "$tmp/wing_in_core.txt"

sed -E "s#^wing_names (.*)#wing_names \1 Supervisor#" tools/line_budget.txt >"$tmp/mention.txt"
expect 1 "these core lines mention a wing" "$tmp/mention.txt"

sed -E "s#^afternoon_budget .*#afternoon_budget 3500\nafternoon docs/no_such_file.h#" tools/line_budget.txt >"$tmp/missing.txt"
expect 1 "names docs/no_such_file.h, which does not exist" "$tmp/missing.txt"

(( failures == 0 )) && echo "PASS" || exit 1
