#!/usr/bin/env bash
# run_doc_commands.sh: runs every fenced block marked ```sh runnable in the given Markdown pages, so the
# commands the docs show cannot drift from the programs. Each block runs as one bash script with
# `set -euo pipefail` and must exit 0; a failing block prints its commands and the tail of its output.
#
#   tools/docs/run_doc_commands.sh --workspace docs/*.md   # from the workspace root, exactly as typed
#   ./bazelw test //docs:runnable_commands_test            # the same inside Bazel (what CI runs)
#
# Inside a Bazel test (TEST_SRCDIR is set) the commands run against the binaries in the test's runfiles:
#   ./bazelw build ...                             ->  nothing (the test's data is built)
#   ./bazelw run [-c opt] //pkg:target [-- args]   ->  <runfiles>/pkg/target args
#   ./bazelw run //pkg                             ->  <runfiles>/pkg/pkg (a target named after its package)
#   bazel-bin/pkg/target                           ->  <runfiles>/pkg/target
# and /tmp/ becomes the test's own temporary folder, so parallel runs never share files. The working
# folder is the runfiles tree, which holds the docs and their data (docs/traces/) as in the workspace.
# Mark only what is fast: small --max_steps, --dataset=synthetic, a few MiB.
set -uo pipefail

mode=bazel
if [[ "${1:-}" == "--workspace" ]]; then
  mode=workspace
  shift
fi
if [[ $# -eq 0 ]]; then
  echo "usage: $0 [--workspace] PAGE.md..." >&2
  exit 2
fi

if [[ "$mode" == bazel ]]; then
  [[ -n "${TEST_SRCDIR:-}" ]] || { echo "$0: not in a Bazel test; pass --workspace" >&2; exit 2; }
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-tinyddp}"
  tmp="${TEST_TMPDIR:?}"
  cd "$root" || exit 1
fi

# Rewrites one block for the runfiles tree (bazel mode).
translate() {
  sed -E \
    -e "s#^[[:space:]]*\./bazelw build .*#true  \# built already: the test's data#" \
    -e "s#\./bazelw run( -c opt| --config=opt)? //([A-Za-z0-9_/]+):([A-Za-z0-9_]+)( --)?#$root/\2/\3#g" \
    -e "s#\./bazelw run( -c opt| --config=opt)? //([A-Za-z0-9_/]*/)?([A-Za-z0-9_]+)( --)?#$root/\2\3/\3#g" \
    -e "s#(^|[ =])bazel-bin/#\1$root/#g" \
    -e "s#/tmp/#$tmp/#g"
}

failed=0
ran=0
for page in "$@"; do
  [[ -f "$page" ]] || { echo "$0: no such page: $page" >&2; exit 2; }
  block=""
  in_block=0
  start=0
  line_no=0
  while IFS= read -r line || [[ -n "$line" ]]; do
    line_no=$((line_no + 1))
    if [[ $in_block -eq 0 && "$line" =~ ^\`\`\`sh[[:space:]]+runnable[[:space:]]*$ ]]; then
      in_block=1
      block=""
      start=$line_no
      continue
    fi
    if [[ $in_block -eq 1 && "$line" =~ ^\`\`\`[[:space:]]*$ ]]; then
      in_block=0
      ran=$((ran + 1))
      script="$block"
      [[ "$mode" == bazel ]] && script="$(printf '%s' "$block" | translate)"
      echo "=== $page:$start"
      printf '%s\n' "$block" | sed 's/^/    /'
      output="$(timeout 600 bash -c "set -euo pipefail; $script" 2>&1)"
      status=$?
      if [[ $status -ne 0 ]]; then
        failed=$((failed + 1))
        echo "--- FAILED (exit $status); last lines of its output:"
        printf '%s\n' "$output" | tail -25 | sed 's/^/    | /'
        if [[ "$mode" == bazel ]]; then
          echo "    (commands as run here:)"
          printf '%s\n' "$script" | sed 's/^/    > /'
        fi
      else
        echo "--- ok"
      fi
      continue
    fi
    [[ $in_block -eq 1 ]] && block+="$line"$'\n'
  done <"$page"
  [[ $in_block -eq 1 ]] && { echo "$page:$start: a runnable block is never closed" >&2; failed=$((failed + 1)); }
done
echo "runnable blocks: $ran run, $failed failed"
[[ $ran -gt 0 ]] || { echo "$0: no \`\`\`sh runnable block found in: $*" >&2; exit 1; }
[[ $failed -eq 0 ]]
