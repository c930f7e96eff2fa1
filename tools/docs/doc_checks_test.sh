#!/usr/bin/env bash
# doc_checks_test: the doc checks catch what they claim to. run_doc_commands.sh must pass a page
# whose output blocks match (numbers, `...` and spacing varying) and fail each page that differs (a word,
# an exact block's number, an extra line, an output block after a block that is not run); check_links.sh
# must pass the links that resolve and report every dead one; check_chinese.sh must pass a Chinese part that
# matches its English and fail each way one can drift. The pages are in testdata/.
set -uo pipefail

here="$TEST_SRCDIR/${TEST_WORKSPACE:-tinyddp}/tools/docs"
work="${TEST_TMPDIR:?}/pages"
mkdir -p "$work" && cp "$here"/testdata/* "$work"/ && cd "$work" || exit 1
# Both scripts run as a person runs them, from a workspace: here the folder of the test pages.
run() { env -u TEST_SRCDIR "$@" >"$work/log" 2>&1; }

failures=0
expect() {  # expect pass|fail DESCRIPTION COMMAND...
  local want="$1" what="$2"
  shift 2
  if run "$@"; then got=pass; else got=fail; fi
  if [[ "$got" == "$want" ]]; then
    echo "ok: $what"
  else
    echo "WRONG: $what: expected $want, got $got; its output:"
    sed 's/^/    | /' "$work/log"
    failures=$((failures + 1))
  fi
}

commands="$here/run_doc_commands.sh"
links="$here/check_links.sh"

expect pass "matching outputs pass" "$commands" --workspace outputs_match.md
if ! grep -q "2 run, 2 output(s) compared, 0 failed" "$work/log"; then
  echo "WRONG: not both outputs compared"
  failures=$((failures + 1))
fi
expect fail "a different word fails" "$commands" --workspace output_differs.md
expect fail "a different number in an exact block fails" "$commands" --workspace output_exact_differs.md
expect fail "an extra line fails" "$commands" --workspace output_extra_lines.md
expect fail "an output block after a block that is not run fails" "$commands" --workspace output_orphan.md

expect pass "links that resolve pass" "$links" links_ok.md
expect fail "dead links fail" "$links" links_dead.md
for dead in "missing.md: no such file" "three_lines.txt#L4: three_lines.txt has 3 lines" \
            "three_lines.txt#L2-L9: three_lines.txt has 3 lines" "../../outside.md leaves the repository" \
            "also_missing.md: no such file"; do
  grep -qF "$dead" "$work/log" || { echo "WRONG: not reported: $dead"; failures=$((failures + 1)); }
done

chinese="$here/check_chinese.sh"
expect pass "a Chinese part that matches its English passes" "$chinese" chinese_ok.md
expect fail "ASCII quotes in Chinese prose fail" "$chinese" chinese_quotes.md
expect fail "a Chinese table row that lacks a file the English row links fails" "$chinese" chinese_row_missing_link.md
expect fail "a Chinese subsection that lacks an English command fails" "$chinese" chinese_command_missing.md
expect fail "a picture read in English only fails" "$chinese" chinese_no_picture_reading.md
expect fail "a tutorial command the Chinese does not name fails" "$chinese" chinese_tutorial_command_missing.md
expect fail "a page promised in Chinese without a Chinese section fails" "$chinese" --translated links_ok.md links_ok.md

echo "$failures wrong"
[[ $failures -eq 0 ]]
