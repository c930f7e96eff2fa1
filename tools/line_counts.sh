#!/usr/bin/env bash
# Lines of production code per top-level package: every tracked .h/.cc/.cu/.cuh/.inc except tests
# (*_test.cc) and test helpers (any testing/ folder). For checking that a change does not grow the code:
#
#   tools/line_counts.sh             # the working tree's tracked files
#   tools/line_counts.sh 4fd179d     # as of a commit
#   tools/line_counts.sh 4fd179d HEAD   # both, side by side with the difference
set -euo pipefail
cd "$(dirname "$0")/.."

# "package lines" for one commit ("" = the working tree).
count() {
  local rev=$1
  local files
  if [[ -z $rev ]]; then files=$(git ls-files); else files=$(git ls-tree -r --name-only "$rev"); fi
  grep -E '\.(h|cc|cu|cuh|inc)$' <<<"$files" | grep -vE '_test\.cc$|(^|/)testing/' | grep / |
    while read -r f; do
      if [[ -z $rev ]]; then n=$(wc -l <"$f"); else n=$(git show "$rev:$f" | wc -l); fi
      echo "${f%%/*} $n"
    done | awk '{ sum[$1] += $2 } END { for (p in sum) print p, sum[p] }' | sort
}

if (( $# <= 1 )); then
  count "${1:-}" | awk '{ printf "%-12s %6d\n", $1, $2; total += $2 } END { printf "%-12s %6d\n", "total", total }'
  exit 0
fi
join -a1 -a2 -e0 -o 0,1.2,2.2 <(count "$1") <(count "$2") |
  awk -v a="$1" -v b="$2" 'BEGIN { printf "%-12s %8s %8s %7s\n", "package", a, b, "change" }
       { printf "%-12s %8d %8d %+7d\n", $1, $2, $3, $3 - $2; ta += $2; tb += $3 }
       END { printf "%-12s %8d %8d %+7d\n", "total", ta, tb, tb - ta }'
