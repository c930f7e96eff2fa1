#!/usr/bin/env bash
# Counts the test cases in gtest XML reports (--gtest_output=xml, or Bazel's bazel-testlogs/**/test.xml),
# for .ci/run and tools/run_gpu_tests.sh:
#
#   tools/gtest_xml_counts.sh LABEL=FILE.xml ...
#
# prints one line per failed case ("failed LABEL Suite.Case"), one per skipped case ("skipped LABEL
# Suite.Case: reason"), and last "counts P F S" (passed, failed, skipped). A case is
#   skipped  when gtest marks it result="skipped" (GTEST_SKIP, as gtest 1.12 writes it:
#            <testcase ... status="run" result="skipped" ...><skipped message="file:line&#x0A;reason">)
#            or status="notrun" (a DISABLED_ test);
#   failed   when it holds a <failure> (gtest) or <error> (Bazel's own report for a binary that crashed);
#   passed   otherwise.
# A binary that died before writing its report has no cases here: the caller counts it as failed.
set -euo pipefail
(( $# )) || { sed -n '2,15p' "$0"; exit 2; }

for arg in "$@"; do
  label=${arg%%=*}
  file=${arg#*=}
  [[ -f $file ]] || continue
  awk -v label="$label" '
    function attr(line, key,   m) {
      if (match(line, " " key "=\"[^\"]*\"")) { m = substr(line, RSTART + length(key) + 3, RLENGTH - length(key) - 4); return m }
      return ""
    }
    function reason(line,   m) {  # the skip message without its "file:line" first line
      m = attr(line, "message"); sub(/^[^&]*&#x0A;/, "", m); sub(/&#x0A;.*/, "", m); return m
    }
    function finish() {
      if (!open_case) return
      if (state == "failed") { print "failed " label " " name }
      else if (state == "skipped") { print "skipped " label " " name (why != "" ? ": " why : "") }
      else { print "passed " label " " name }
      open_case = 0
    }
    {
      # CDATA sections hold what a test printed, which may look like XML: drop them first.
      line = $0
      if (in_cdata) { i = index(line, "]]>"); if (!i) next; line = substr(line, i + 3); in_cdata = 0 }
      while ((i = index(line, "<![CDATA[")) > 0) {
        rest = substr(line, i + 9); j = index(rest, "]]>")
        if (j) { line = substr(line, 1, i - 1) substr(rest, j + 3) } else { line = substr(line, 1, i - 1); in_cdata = 1 }
      }
    }
    line ~ /<testcase[ >]/ {
      finish()
      open_case = 1; why = ""; state = "passed"
      name = attr(line, "classname"); name = (name != "" ? name "." : "") attr(line, "name")
      if (line ~ /result="skipped"/) state = "skipped"
      if (line ~ /status="notrun"/) { state = "skipped"; why = "disabled" }
    }
    open_case && line ~ /<(failure|error)[ >]/ { state = "failed" }
    open_case && line ~ /<skipped[ >]/ && state != "failed" { state = "skipped"; why = reason(substr(line, index(line, "<skipped"))) }
    open_case && (line ~ /<testcase[^>]*\/>/ || line ~ /<\/testcase>/) { finish() }
    END { finish() }
  ' "$file"
done | awk '
  $1 == "passed" { p++; next }
  $1 == "failed" { f++ } $1 == "skipped" { s++ }
  { print }
  END { printf "counts %d %d %d\n", p, f, s }
'
