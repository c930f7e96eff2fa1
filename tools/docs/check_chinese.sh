#!/usr/bin/env bash
# check_chinese.sh: the Chinese parts of the pages say what the English parts say, so a reader of either
# can trust them. It checks, for each page given:
#   1. Chinese prose (a line with a Chinese comma or full stop) quotes with Chinese quotation marks (“...”),
#      not ASCII "..." (code spans excepted; an English sentence may quote a Chinese title as English does);
#   2. a table in a "## 中文..." section whose rows are numbered (tutorial_map.md's ten steps) links every
#      file that the English table's row of the same number links (rows 9a, 9b, 9c are step 9);
#   3. a page that explains a picture in English ("How to read it" shortly after an image) explains it in
#      Chinese too ("怎么读这张图");
#   4. where the "## 中文..." section has numbered subsections ("### 3. ..."), every numbered English
#      section ("## 3. ...") has one, and every line of the English section's ```sh blocks (the commands)
#      appears in the Chinese subsection's, so neither can gain or change a command alone;
#   5. every command or call in the first column of an English table headed "| the tutorial |" (what the
#      tutorial has you type, and its mistakes) is named in the "## 中文..." section too.
# A page named with --translated must have a "## 中文..." section at all (the pages whose Chinese a reader
# was promised). Prints each problem as PAGE:LINE: what, and exits 1 if there is any.
#
#   tools/docs/check_chinese.sh --translated docs/exercises.md docs/*.md     # from the workspace root
#   ./bazelw test //docs:chinese_test          # the same inside Bazel (what CI runs)
set -uo pipefail

translated=" "
while [[ "${1:-}" == "--translated" && $# -ge 2 ]]; do
  translated+="$2 "
  shift 2
done
if [[ $# -eq 0 ]]; then
  echo "usage: $0 [--translated PAGE.md]... PAGE.md..." >&2
  exit 2
fi
if [[ -n "${TEST_SRCDIR:-}" ]]; then
  cd "$TEST_SRCDIR/${TEST_WORKSPACE:-tinyddp}" || exit 1
fi

problems=0
for page in "$@"; do
  [[ -f "$page" ]] || { echo "$0: no such page: $page" >&2; exit 2; }
  # Byte-wise (LC_ALL=C): the Chinese marks below are matched as their UTF-8 bytes.
  required=0
  [[ "$translated" == *" $page "* ]] && required=1
  LC_ALL=C awk -v page="$page" -v required="$required" '
    # Chinese prose: a line with "，", "。" or "、".
    function chinese(s) { return s ~ /\357\274\214|\343\200\202|\343\200\201/ }
    function nocode(s) { gsub(/`[^`]*`/, "", s); return s }
    # The repository files a line links: "](../dist/ddp/ddp.cc)" -> "dist/ddp/ddp.cc", space-separated.
    function links(s,    out, m) {
      out = " "
      while (match(s, /\]\([^)#]+/)) {
        m = substr(s, RSTART + 2, RLENGTH - 2)
        sub(/^(\.\.\/)+/, "", m)
        out = out m " "
        s = substr(s, RSTART + RLENGTH)
      }
      return out
    }
    function problem(line, what) { printf "%s:%d: %s\n", page, line, what; bad++ }
    {
      line = $0
      if (zh) zh_text = zh_text "\n" line  # its prose, tables and blocks
      if (line ~ /^```/) {
        if (!fenced) { fenced = 1; shell = (line ~ /^```sh/) } else { fenced = 0; shell = 0 }
        next
      }
      if (fenced) {
        if (shell && line !~ /^[ \t]*$/) {
          if (zh && zh_sub != "") zh_cmd[zh_sub] = zh_cmd[zh_sub] "\n" line
          else if (!zh && en_sec != "") { en_cmd[en_sec] = en_cmd[en_sec] "\n" line; en_cmd_line[en_sec, line] = NR }
        }
        next
      }
      if (line ~ /^## /) {
        zh = (line ~ /^## \344\270\255\346\226\207/)  # "## 中文"
        if (zh) has_zh = 1
        zh_sub = ""
        en_sec = ""
        if (!zh && match(line, /^## [0-9]+\. /)) { en_sec = substr(line, 4, RLENGTH - 5); en_line[en_sec] = NR }
      } else if (zh && match(line, /^### [0-9]+\. /)) {
        zh_sub = substr(line, 5, RLENGTH - 6); zh_has[zh_sub] = 1; zh_subs++
      }
      if (chinese(line) && index(nocode(line), "\"") > 0) problem(NR, "ASCII quotation marks in Chinese text; use “...”")
      if (line ~ /!\[/) image = NR
      if ((line ~ /^How to read it/ || line ~ /^## How to read it/) && image && NR - image <= 12) how_en = NR
      if (index(line, "\346\200\216\344\271\210\350\257\273\350\277\231\345\274\240\345\233\276") > 0) how_zh = 1  # 怎么读这张图
      # Rows of an English "| the tutorial |" table: the code spans of their first cell.
      if (line ~ /^\| the tutorial \|/) tutorial_table = 1
      else if (line !~ /^\|/) tutorial_table = 0
      else if (tutorial_table && line !~ /^\| ---/) {
        cell = line; sub(/^\| /, "", cell); gsub(/\\\|/, "\001", cell); sub(/ \|.*$/, "", cell)
        while (match(cell, /`[^`]+`/)) {
          code = substr(cell, RSTART + 1, RLENGTH - 2); gsub(/\001/, "|", code)
          tutorial_code[code] = NR
          cell = substr(cell, RSTART + RLENGTH)
        }
      }
      # Numbered table rows: "| 9 | ..." (Chinese) and "| 9a | ..." (English).
      if (match(line, /^\| [0-9]+[a-z]? \|/)) {
        key = substr(line, 3, RLENGTH - 4); sub(/[a-z]$/, "", key)
        if (zh) { zh_row[key] = zh_row[key] links(line); zh_rows++ }
        else { en_row[key] = en_row[key] links(line); en_row_line[key] = NR }
      }
    }
    END {
      if (required && !has_zh) problem(1, "no \"## 中文...\" section, and the page is one with a Chinese part")
      if (how_en && !how_zh) problem(how_en, "a picture explained in English (How to read it) but not in Chinese (怎么读这张图)")
      if (zh_rows) {
        for (key in en_row) {
          if (!(key in zh_row)) { problem(en_row_line[key], "step " key " has no row in the Chinese table"); continue }
          n = split(en_row[key], files, " ")
          for (i = 1; i <= n; i++) {
            if (files[i] != "" && index(zh_row[key], " " files[i] " ") == 0) {
              problem(en_row_line[key], "the Chinese table'"'"'s row " key " does not link " files[i] " (the English row does)")
            }
          }
        }
      }
      if (has_zh) {
        for (code in tutorial_code) {
          if (index(zh_text, code) == 0) problem(tutorial_code[code], "the Chinese section does not name " code " (the English table of the tutorial does)")
        }
      }
      if (zh_subs) {
        for (sec in en_line) {
          if (!(sec in zh_has)) { problem(en_line[sec], "section " sec " has no Chinese subsection (### " sec ". ...)"); continue }
          n = split(en_cmd[sec], cmds, "\n")
          for (i = 1; i <= n; i++) {
            if (cmds[i] != "" && index(zh_cmd[sec] "\n", "\n" cmds[i] "\n") == 0) {
              problem(en_cmd_line[sec, cmds[i]], "the Chinese subsection " sec " lacks this command: " cmds[i])
            }
          }
        }
      }
      exit bad > 0
    }
  ' "$page" || problems=$((problems + 1))
done
if [[ $problems -eq 0 ]]; then
  echo "check_chinese: $# page(s): the Chinese parts match the English"
fi
[[ $problems -eq 0 ]]
