#!/usr/bin/env bash
# Lines of production code per top-level package: every .h/.cc/.cu/.cuh/.inc except tests (*_test.cc) and
# test helpers (any testing/ folder). For checking that a change does not grow the code:
#
#   tools/line_counts.sh             # the working tree (tracked files and new ones git does not ignore)
#   tools/line_counts.sh 4fd179d     # as of a commit
#   tools/line_counts.sh 4fd179d HEAD   # both, side by side with the difference
#   tools/line_counts.sh --check     # the budgets of tools/line_budget.txt: the core, the README's afternoon
#                                    # path, and the dist/ lines the two first examples build from; and the
#                                    # walls between core and wings: no core file mentions a wing, no core
#                                    # library sees or uses one (needs Bazel: ./bazelw); exits 1 naming what
#                                    # is wrong
#   LINE_BUDGET=FILE tools/line_counts.sh --check   # against another budget file
set -euo pipefail
cd "$(dirname "$0")/.."

is_code() { grep -E '\.(h|cc|cu|cuh|inc)$' | grep -vE '_test\.cc$|(^|/)testing/'; }
worktree_files() { git ls-files --cached --others --exclude-standard | sort -u | while read -r f; do [[ -f $f ]] && echo "$f"; done; }

# "package lines" for one commit ("" = the working tree).
count() {
  local rev=$1
  local files
  if [[ -z $rev ]]; then files=$(worktree_files); else files=$(git ls-tree -r --name-only "$rev"); fi
  is_code <<<"$files" | grep / |
    while read -r f; do
      if [[ -z $rev ]]; then n=$(wc -l <"$f"); else n=$(git show "$rev:$f" | wc -l); fi
      echo "${f%%/*} $n"
    done | awk '{ sum[$1] += $2 } END { for (p in sum) print p, sum[p] }' | sort
}

# Sum of the lines of the given files (one per line on stdin).
sum_lines() { local total=0 f; while read -r f; do [[ -f $f ]] && total=$((total + $(wc -l <"$f"))); done; echo "$total"; }

check() {
  local budget=${LINE_BUDGET:-tools/line_budget.txt} failed=0 misses=0
  field() { awk -v k="$1" '$1 == k { $1 = ""; print }' "$budget"; }
  local all; all=$(worktree_files | is_code)

  # The core: its folders and files, measured against its budget; no core path may name a wing.
  local core_files=""
  for place in $(field core); do
    core_files+=$(grep -E "^${place}(/|$)" <<<"$all" || true)$'\n'
  done
  core_files=$(sed '/^$/d' <<<"$core_files" | sort -u)
  local core_lines core_budget
  core_lines=$(sum_lines <<<"$core_files")
  core_budget=$(field core_budget | tr -d ' ')
  printf '%-44s %6d lines (budget %d)\n' "core ($(wc -l <<<"$core_files") files)" "$core_lines" "$core_budget"
  if (( core_lines > core_budget )); then
    echo "line_counts: the core is over its budget by $((core_lines - core_budget)) lines. Move the new code into a wing"
    echo "  (its own folder and target behind a seam), or raise core_budget in $budget with a dated decision line."
    failed=1
  fi
  local words; words=$(field wing_words | xargs | tr ' ' '|')
  local named; named=$(grep -E "($words)" <<<"$core_files" || true)
  if [[ -n $named ]]; then
    echo "line_counts: these core files are named after a wing ($words); move them to the wing's folder:"
    sed 's/^/  /' <<<"$named"
    failed=1
  fi

  # No core file mentions a wing: no include of one, no path into one, none of its names. A seam says what
  # it offers; docs/design.md says which wing attaches where.
  local wing_re names_re mentions
  wing_re=$(field wing | xargs | tr ' ' '|')
  names_re=$(field wing_names | xargs | tr ' ' '|')
  local mention_re="${wing_re:+(${wing_re})}${wing_re:+${names_re:+|}}${names_re:+\\b(${names_re})\\b}"
  mentions=$([[ -z $mention_re ]] || while read -r f; do
    [[ -n $f ]] && grep -nHE "$mention_re" "$f" || true
  done <<<"$core_files")
  if [[ -n $mentions ]]; then
    echo "line_counts: these core lines mention a wing (a folder of: $(field wing | xargs), or one of its names);"
    echo "  the core names its seams, not what attaches there (docs/design.md's seams table does):"
    sed 's/^/  /' <<<"$mentions"
    failed=1
  fi

  # The README's afternoon path.
  local afternoon afternoon_lines afternoon_budget
  afternoon=$(field afternoon | tr ' ' '\n' | sed '/^$/d')
  afternoon_lines=$(sum_lines <<<"$afternoon")
  afternoon_budget=$(field afternoon_budget | tr -d ' ')
  printf '%-44s %6d lines (budget %d)\n' "afternoon path ($(wc -l <<<"$afternoon") files)" "$afternoon_lines" "$afternoon_budget"
  while read -r f; do [[ -f $f ]] || { echo "line_counts: the afternoon path names $f, which does not exist"; failed=1; }; done <<<"$afternoon"
  if (( afternoon_lines > afternoon_budget )); then
    echo "line_counts: the afternoon path is over its budget by $((afternoon_lines - afternoon_budget)) lines"
    failed=1
  fi

  # What the first examples build from: dist/ lines, and no wing. (LINE_COUNTS_NO_QUERY=1 skips this part,
  # for tools/line_counts_test.sh, which runs inside Bazel and cannot call it.)
  local bazel=./bazelw
  [[ -n ${LINE_COUNTS_NO_QUERY:-} ]] && { (( failed == 0 )) && echo "line_counts: every budget holds (examples not queried)"; return "$failed"; }
  # No core library may see a wing library, nor depend on one (a program's package may: //dist/launch:launch
  # is an sh_binary that only links to //dist/elastic:launch, so it is not a cc_library and not checked).
  local wing_set="" core_set="" place pkg
  for place in $(field wing); do wing_set+="${wing_set:+ + }//${place}/..."; done
  for place in $(field core); do
    if [[ -d $place ]]; then pkg="//${place}/..."; else pkg="//$(dirname "$place"):all"; fi
    [[ " $core_set " == *" $pkg "* ]] || core_set+="${core_set:+ + }$pkg"
  done
  local wing_libs="kind('cc_library', $wing_set)" core_libs="kind('cc_library', $core_set)"
  local used seen visible_query=""
  if ! used=$($bazel query --noshow_progress "kind('cc_library', deps($core_libs)) intersect $wing_libs" 2>/dev/null); then
    echo "line_counts: bazel query for the core's dependencies failed (run ./bazelw query 'deps($core_libs)')"
    failed=1
  elif [[ -n $used ]]; then
    echo "line_counts: core libraries depend on these wing libraries (a wing attaches at a seam; move the code):"
    sed 's/^/  /' <<<"$used"
    failed=1
  fi
  for pkg in $($bazel query --noshow_progress "$core_libs" --output=package 2>/dev/null); do
    local one; one=$($bazel query --noshow_progress "kind('cc_library', //$pkg:all)" 2>/dev/null | head -1)
    [[ -n $one ]] && visible_query+="${visible_query:+ + }visible($one, $wing_libs)"
  done
  if [[ -z $visible_query ]] || ! seen=$($bazel query --noshow_progress "$visible_query" 2>/dev/null); then
    echo "line_counts: bazel query for the wings' visibility failed"
    failed=1
  elif [[ -n $seen ]]; then
    echo "line_counts: these wing libraries are visible to a core package (give their package"
    echo "  default_visibility = WING_USERS, dist/visibility.bzl):"
    sed 's/^/  /' <<<"$seen"
    failed=1
  fi

  while read -r target ceiling; do
    [[ -n $target ]] || continue
    local sources
    if ! sources=$($bazel query --noshow_progress "kind('source file', deps($target))" 2>/dev/null); then
      echo "line_counts: bazel query for $target failed (run ./bazelw query 'deps($target)' to see why)"
      failed=1
      continue
    fi
    local dist_files dist_lines wings
    dist_files=$(sed -nE 's#^//(dist[^:]*):(.*)$#\1/\2#p' <<<"$sources" | is_code || true)
    dist_lines=$(sum_lines <<<"$dist_files")
    printf '%-44s %6d lines (ceiling %d)\n' "dist/ files of $target ($(grep -c . <<<"$dist_files") files)" "$dist_lines" "$ceiling"
    # A ceiling measured and missed may be recorded (example_missed TARGET LIMIT DATE ...): the check then
    # says so on every run and fails only past that limit, so the miss stays visible and cannot grow.
    local missed; missed=$(awk -v t="$target" '$1 == "example_missed" && $2 == t { print $3 }' "$budget")
    if (( dist_lines > ceiling )) && [[ -n $missed ]] && (( dist_lines <= missed )); then
      echo "line_counts: $target is $((dist_lines - ceiling)) lines over its ceiling of $ceiling: a recorded miss"
      echo "  (example_missed in $budget allows at most $missed until it is closed; see the decision there)"
      misses=$((misses + 1))
    elif (( dist_lines > ceiling )); then
      echo "line_counts: $target builds from $dist_lines dist/ lines, over its ceiling of $ceiling"
      failed=1
    fi
    wings=$(grep -E "($words)" <<<"$dist_files" || true)
    if [[ -n $wings ]]; then
      echo "line_counts: $target builds from wing files (it must use the core only):"
      sed 's/^/  /' <<<"$wings"
      failed=1
    fi
  done < <(field example_ceiling)
  if (( failed == 0 && misses > 0 )); then
    echo "line_counts: the budgets hold, and $misses ceiling(s) are missed as recorded in $budget"
  elif (( failed == 0 )); then
    echo "line_counts: every budget holds"
  fi
  return "$failed"
}

if [[ ${1:-} == --check ]]; then
  check
  exit $?
fi
if (( $# <= 1 )); then
  count "${1:-}" | awk '{ printf "%-12s %6d\n", $1, $2; total += $2 } END { printf "%-12s %6d\n", "total", total }'
  exit 0
fi
join -a1 -a2 -e0 -o 0,1.2,2.2 <(count "$1") <(count "$2") |
  awk -v a="$1" -v b="$2" 'BEGIN { printf "%-12s %8s %8s %7s\n", "package", a, b, "change" }
       { printf "%-12s %8d %8d %+7d\n", $1, $2, $3, $3 - $2; ta += $2; tb += $3 }
       END { printf "%-12s %8d %8d %+7d\n", "total", ta, tb, tb - ta }'
