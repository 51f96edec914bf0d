#!/usr/bin/env bash
# Screenshots of a `turbokv report` page in a real browser (Debian's
# chromium, headless) at a desktop and a narrow width, to check what a person
# sees: scripts/report-screenshots.sh report.html [OUT_PREFIX]
# writes OUT_PREFIX-1400.png and OUT_PREFIX-800.png (default: the page's name).
set -euo pipefail
page=$(realpath "$1")
out=${2:-${page%.html}}
command -v chromium >/dev/null || { echo "report-screenshots: needs chromium: sudo apt-get install -y chromium" >&2; exit 1; }
for w in 1400 800; do
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="$w",3000 \
           --screenshot="$out-$w.png" "file://$page" 2>/dev/null
  echo "wrote $out-$w.png"
done
