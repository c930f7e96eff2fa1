#!/usr/bin/env bash
# run_doc_commands.sh: runs every fenced block marked ```sh runnable in the given Markdown pages, so the
# commands the docs show cannot drift from the programs. Each block runs as one bash script with
# `set -euo pipefail` and must exit 0; a failing block prints its commands and the tail of its output.
#
#   tools/docs/run_doc_commands.sh --workspace docs/*.md   # from the workspace root, exactly as typed
#   ./bazelw test //docs:runnable_commands_test            # the same inside Bazel (what CI runs)
#
# What a page shows a command printing is checked too. The next fenced block after a runnable one, if it is
# marked ```output, is compared with what the block printed (stdout and stderr together), line by line:
#   - every number matches any number: a run of digits, with or without a decimal part ("0.4366", "40123",
#     "ETA 0:18"), so timings, ports, pids and losses may vary; the words around them may not;
#   - a run of spaces matches any run of spaces (columns widen with their numbers);
#   - `...` inside a line matches any text (a temporary path); a line that is only `...` matches any
#     number of whole lines, none included (the middle of a long run);
#   - trailing spaces and leading or trailing blank lines are ignored.
# ```output exact keeps only `...`: numbers and spaces must then be the program's, character for character
# (the demos' tensors, where a wrong number is the bug), and `...` elides what does vary (a port).
# Prose may sit between the two blocks ("prints:"); an output block that does not follow a runnable one
# is an error, so every block marked output is a checked one.
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
else
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
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

# Compares a page's output block (file $1) with what the command printed (file $2), by the rules above
# ($3: "exact" or "loose"). Prints nothing and exits 0 when they match; otherwise says where they part.
compare_output() {
  awk -v exact="$3" '
    function trim(s) { sub(/[ \t\r]+$/, "", s); return s }
    # One expected line as an anchored regular expression.
    function pattern(line,    out, c, i, n) {
      out = "^"
      n = length(line)
      for (i = 1; i <= n; ) {
        c = substr(line, i, 1)
        if (substr(line, i, 3) == "...") { out = out ".*"; i += 3; continue }
        if (exact != "exact" && c ~ /[0-9]/) {
          while (i <= n && substr(line, i, 1) ~ /[0-9]/) i++
          if (substr(line, i, 1) == "." && substr(line, i + 1, 1) ~ /[0-9]/) {
            i++
            while (i <= n && substr(line, i, 1) ~ /[0-9]/) i++
          }
          out = out "[0-9]+([.][0-9]+)?"
          continue
        }
        if (exact != "exact" && c == " ") {
          while (i <= n && substr(line, i, 1) == " ") i++
          out = out " +"
          continue
        }
        if (index("\\^$.[]|()*+?{}/", c) > 0) out = out "\\" c
        else out = out c
        i++
      }
      return out "$"
    }
    function line_matches(e, a) {
      if (want[e] == "...") return 0
      return got[a] ~ re[e]
    }
    FNR == NR { want[++nw] = trim($0); next }
    { got[++ng] = trim($0) }
    END {
      # Leading and trailing blank lines do not count.
      wf = 1; while (wf <= nw && want[wf] == "") wf++
      while (nw >= wf && want[nw] == "") nw--
      gf = 1; while (gf <= ng && got[gf] == "") gf++
      while (ng >= gf && got[ng] == "") ng--
      for (e = wf; e <= nw; e++) if (want[e] != "...") re[e] = pattern(want[e])
      # ok[e, a]: lines e.. of the block match lines a.. of the output. A "..." line may swallow any
      # number of lines, so this is a small table filled from the ends, not a greedy scan.
      for (e = nw + 1; e >= wf; e--) {
        for (a = ng + 1; a >= gf; a--) {
          if (e == nw + 1) ok[e, a] = (a == ng + 1)
          else if (want[e] == "...") ok[e, a] = ok[e + 1, a] || (a <= ng && ok[e, a + 1])
          else ok[e, a] = a <= ng && line_matches(e, a) && ok[e + 1, a + 1]
        }
      }
      if (ok[wf, gf]) exit 0
      # Where they part: walk both as far as lines match in order (first match wins).
      a = gf
      for (e = wf; e <= nw; e++) {
        if (want[e] == "...") continue
        found = 0
        for (b = a; b <= ng; b++) {
          if (line_matches(e, b)) { found = b; break }
          if (e == wf || want[e - 1] != "...") break
        }
        if (!found) break
        a = found + 1
      }
      if (e <= nw) {
        printf "    the page shows (line %d of its output block):\n    | %s\n", e - wf + 1, want[e]
        if (a <= ng) printf "    where the program printed:\n    | %s\n", got[a]
        else printf "    after the program had printed its last line\n"
      } else {
        printf "    the program printed more lines than the page shows, from:\n    | %s\n", got[a]
      }
      exit 1
    }
  ' "$1" "$2"
}

failed=0
ran=0
compared=0
for page in "$@"; do
  [[ -f "$page" ]] || { echo "$0: no such page: $page" >&2; exit 2; }
  block=""
  kind=""              # "run" or "output" inside a block we read, "" otherwise
  exact=loose
  start=0
  line_no=0
  last_output=""       # what the last runnable block printed, while its output block may still come
  last_run_ok=0
  awaiting_output=0    # the last fenced block was a runnable one
  last_start=0
  in_other=0           # inside some other fenced block
  while IFS= read -r line || [[ -n "$line" ]]; do
    line_no=$((line_no + 1))
    if [[ $in_other -eq 1 ]]; then
      [[ "$line" =~ ^\`\`\`[[:space:]]*$ ]] && in_other=0
      continue
    fi
    if [[ -z "$kind" ]]; then
      if [[ "$line" =~ ^\`\`\`sh[[:space:]]+runnable[[:space:]]*$ ]]; then
        kind=run; block=""; start=$line_no
      elif [[ "$line" =~ ^\`\`\`output([[:space:]]+exact)?[[:space:]]*$ ]]; then
        kind=output; block=""; start=$line_no
        exact=loose; [[ -n "${BASH_REMATCH[1]}" ]] && exact=exact
      elif [[ "$line" =~ ^\`\`\` ]]; then
        in_other=1
        awaiting_output=0
      fi
      continue
    fi
    if [[ "$line" =~ ^\`\`\`[[:space:]]*$ ]]; then
      if [[ "$kind" == run ]]; then
        ran=$((ran + 1))
        script="$block"
        [[ "$mode" == bazel ]] && script="$(printf '%s' "$block" | translate)"
        echo "=== $page:$start"
        printf '%s' "$block" | sed 's/^/    /'
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
          last_run_ok=0
        else
          echo "--- ok"
          last_run_ok=1
        fi
        last_output="$output"
        last_start=$start
        awaiting_output=1
      else  # an output block
        if [[ $awaiting_output -ne 1 ]]; then
          echo "=== $page:$start"
          echo "--- FAILED: an \`\`\`output block must be the next fenced block after a \`\`\`sh runnable one"
          failed=$((failed + 1))
        elif [[ $last_run_ok -eq 1 ]]; then
          compared=$((compared + 1))
          echo "=== $page:$start: the output of $page:$last_start ($exact)"
          printf '%s' "$block" >"$tmp/.doc_output_shown"
          printf '%s\n' "$last_output" >"$tmp/.doc_output_printed"
          if report="$(compare_output "$tmp/.doc_output_shown" "$tmp/.doc_output_printed" "$exact")"; then
            echo "--- ok"
          else
            failed=$((failed + 1))
            echo "--- FAILED: the output differs from the page's"
            printf '%s\n' "$report"
            echo "    the whole output:"
            printf '%s\n' "$last_output" | head -60 | sed 's/^/    | /'
          fi
        fi
        awaiting_output=0
      fi
      kind=""
      continue
    fi
    block+="$line"$'\n'
  done <"$page"
  [[ -n "$kind" ]] && { echo "$page:$start: a fenced block is never closed" >&2; failed=$((failed + 1)); }
done
echo "runnable blocks: $ran run, $compared output(s) compared, $failed failed"
[[ $ran -gt 0 ]] || { echo "$0: no \`\`\`sh runnable block found in: $*" >&2; exit 1; }
[[ $failed -eq 0 ]]
