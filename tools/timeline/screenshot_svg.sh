#!/usr/bin/env bash
# screenshot_svg.sh: renders an SVG (a timeline, a cost-model plot) in headless Chromium and saves a PNG,
# so that a person can look at the picture exactly as a browser shows it, fonts and all. Not part of CI:
# it needs Debian's `chromium` (apt-get install -y chromium).
#
#   tools/timeline/screenshot_svg.sh docs/images/timeline_ddp_cpu.svg /tmp/timeline.png [WIDTHxHEIGHT]
#
# The window defaults to the SVG's own width and height (read from its <svg> tag), so nothing is cut off.
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 FILE.svg OUT.png [WIDTHxHEIGHT]" >&2
  exit 2
fi
svg="$1"
png="$2"
[[ -f "$svg" ]] || { echo "$0: no such file: $svg" >&2; exit 1; }
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [[ -z "$browser" ]]; then
  echo "$0: no chromium found; install it with: apt-get install -y chromium" >&2
  exit 1
fi
if [[ $# -eq 3 ]]; then
  size="${3/x/,}"
else
  # width="1400" height="812" on the <svg> element.
  tag="$(grep -o '<svg[^>]*>' "$svg" | head -1)"
  width="$(sed -n 's/.* width="\([0-9]*\)".*/\1/p' <<<"$tag")"
  height="$(sed -n 's/.* height="\([0-9]*\)".*/\1/p' <<<"$tag")"
  size="${width:-1400},${height:-900}"
fi
svg_abs="$(cd "$(dirname "$svg")" && pwd)/$(basename "$svg")"
png_abs="$(cd "$(dirname "$png")" && pwd)/$(basename "$png")"
# A throwaway profile, so the run leaves nothing behind and does not touch a user's browser.
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --screenshot="$png_abs" --window-size="$size" "file://$svg_abs" >/dev/null 2>&1
[[ -s "$png_abs" ]] || { echo "$0: chromium wrote no screenshot" >&2; exit 1; }
echo "$png"
