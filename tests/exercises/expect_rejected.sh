#!/usr/bin/env bash
# expect_rejected.sh CHECK [FLAG...] -- TEXT...: runs an exercise's check built against a known wrong
# solution (the folder's wrong/) and passes only if the check rejects it, saying each TEXT: the reason a
# learner with that mistake reads. So a check that a wrong solution could pass fails in CI, not in front of
# a learner. FLAGs go to the check (a --gtest_filter keeps it short).
set -uo pipefail
check="$1"
shift
flags=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  flags+=("$1")
  shift
done
[[ $# -gt 0 ]] && shift  # the --
log="${TEST_TMPDIR:-/tmp}/wrong_solution.log"
# The check's own gtest report must not become this test's: its failures are the expected outcome here.
env -u XML_OUTPUT_FILE -u GTEST_OUTPUT "$check" "${flags[@]}" >"$log" 2>&1
status=$?
if [[ $status -eq 0 ]]; then
  echo "the check ACCEPTED the wrong solution; its output:"
  sed 's/^/    | /' "$log"
  exit 1
fi
missing=0
for text in "$@"; do
  if ! grep -qF -- "$text" "$log"; then
    echo "the check rejected the wrong solution (exit $status) but never said: $text"
    missing=1
  fi
done
if [[ $missing -ne 0 ]]; then
  echo "its output:"
  sed 's/^/    | /' "$log"
  exit 1
fi
echo "the check rejected the wrong solution, as it should (exit $status). Its first complaint:"
awk '/check_test\.cc:[0-9]+: Failure$/ { shown = 1 } shown && n < 12 { print "    | " $0; n++ }' "$log"
exit 0
