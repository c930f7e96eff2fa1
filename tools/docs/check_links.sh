#!/usr/bin/env bash
# check_links.sh: fails on any relative Markdown link of the docs that leads nowhere, so a file that moves
# cannot leave a dead link behind. For every [text](target), ![alt](target) and [label]: target outside
# code (fenced blocks and `code spans` are skipped) in the given pages:
#   - a URL with a scheme (https:, mailto:) and a same-page anchor (#heading) are left alone;
#   - anything else is a path, relative to the page's folder (or to the workspace when it starts with /),
#     which must exist inside the workspace;
#   - an anchor #L<n> or #L<n>-L<m> (GitHub's line links) must not point past the file's last line.
#
#   tools/docs/check_links.sh                     # from the workspace root: README.md and docs/*.md
#   tools/docs/check_links.sh docs/ddp.md         # some pages only
#   ./bazelw test //docs:links_test               # the same inside Bazel (what CI runs)
#
# Inside a Bazel test a link may name any file of the repository (code included), more than a test's
# runfiles hold, so the script follows the runfiles link of a page of docs/ (the test's data) back to the
# workspace and checks there; the test is tagged `external` so that it runs every time, not from the cache.
set -uo pipefail

if [[ -n "${TEST_SRCDIR:-}" ]]; then
  pages_in_runfiles=("$TEST_SRCDIR/${TEST_WORKSPACE:-tinyddp}"/docs/*.md)
  [[ -e "${pages_in_runfiles[0]}" ]] || { echo "$0: no docs/*.md in the test's data" >&2; exit 2; }
  cd "$(dirname "$(readlink -f "${pages_in_runfiles[0]}")")/.." || exit 2
fi
root="$(pwd -P)"

pages=("$@")
if [[ ${#pages[@]} -eq 0 ]]; then
  pages=(README.md docs/*.md)
fi

# Prints "LINE<TAB>TARGET" for every link of a page that is not inside code.
links_of() {
  awk '
    /^[ \t]*(```|~~~)/ { fenced = !fenced; next }
    fenced { next }
    {
      line = $0
      gsub(/`+[^`]*`+/, "", line)  # code spans: `a](b)` there is code, not a link
      if (match(line, /^[ \t]*\[[^]]+\]:[ \t]+[^ \t]+/)) {  # [label]: target
        ref = substr(line, RSTART, RLENGTH)
        sub(/^[ \t]*\[[^]]+\]:[ \t]+/, "", ref)
        print NR "\t" ref
      }
      while (match(line, /\]\([^)]*\)/)) {  # [text](target) and ![alt](target)
        target = substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
        sub(/^[ \t]*</, "", target); sub(/>[ \t]*$/, "", target)
        sub(/[ \t]+".*"$/, "", target)  # a title: [text](path "title")
        print NR "\t" target
      }
    }
  ' "$1"
}

# Lines in a file, counting a last line without its newline.
line_count() {
  local n
  n=$(wc -l <"$1")
  [[ -s "$1" && -n "$(tail -c 1 "$1")" ]] && n=$((n + 1))
  echo "$n"
}

checked=0
dead=0
for page in "${pages[@]}"; do
  [[ -f "$page" ]] || { echo "$0: no such page: $page" >&2; exit 2; }
  dir="$(dirname "$page")"
  while IFS=$'\t' read -r line target; do
    [[ -z "$target" ]] && continue
    [[ "$target" =~ ^[A-Za-z][A-Za-z0-9+.-]*: ]] && continue  # https:, mailto:
    [[ "$target" == \#* ]] && continue                         # this page's own headings
    checked=$((checked + 1))
    path="${target%%#*}"
    anchor=""
    [[ "$target" == *#* ]] && anchor="${target#*#}"
    if [[ "$path" == /* ]]; then resolved="$root$path"; else resolved="$dir/$path"; fi
    full="$(realpath -m "$resolved")"
    if [[ "$full" != "$root" && "$full" != "$root"/* ]]; then
      echo "$page:$line: $target leaves the repository"
      dead=$((dead + 1))
      continue
    fi
    if [[ ! -e "$full" ]]; then
      echo "$page:$line: $target: no such file (${full#"$root"/})"
      dead=$((dead + 1))
      continue
    fi
    if [[ "$anchor" =~ ^L([0-9]+)(-L([0-9]+))?$ ]]; then
      last="${BASH_REMATCH[3]:-${BASH_REMATCH[1]}}"
      if [[ ! -f "$full" ]]; then
        echo "$page:$line: $target: a line anchor on a folder"
        dead=$((dead + 1))
      elif (( last > $(line_count "$full") || BASH_REMATCH[1] < 1 )); then
        echo "$page:$line: $target: ${full#"$root"/} has $(line_count "$full") lines"
        dead=$((dead + 1))
      fi
    fi
  done < <(links_of "$page")
done
echo "relative links: $checked checked in ${#pages[@]} page(s), $dead dead"
[[ $dead -eq 0 ]]
