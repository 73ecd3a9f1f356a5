#!/usr/bin/env bash
# The README's pictures of `fabprobe report` pages, from inputs in this repository:
#   ring   tests/data/html/ring-slow-egress.json (a network-lab run, node-c's egress shaped
#          to 300 of 1000 Mbit/s; tests/html_report.rs captures it)
#   sweep  `check` of the fixtures under made-up names in two racks, one node missing and
#          one report cut short, grouped by rack
#   topo   the 8-GPU H100 fixture with faults: its `check` findings, then the tree with them marked
# Usage: scripts/html-pictures.sh [OUT_DIR]   (default docs/img; needs chromium)
# With SWEEP_NODES=N it also writes sweep-N.html for N nodes and prints its size.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/img}
mkdir -p "$out"
out=$(realpath "$out")
bin=$(realpath "${FABPROBE:-target/release/fabprobe}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

shot() { # page.html picture.png width height
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --user-data-dir="$tmp/profile" --window-size="$3,$4" --screenshot="$2" "file://$(realpath "$1")" 2>/dev/null
}

# check reports of fixtures, relabelled as node NAME (check prints its JSON on one line)
check_as() { # fixture name
  "$bin" check --root "fixtures/$1" --format json |
    sed "s/\"host\":{\"hostname\":\"[^\"]*\"/\"host\":{\"hostname\":\"$2\"/" >"$tmp/reports/$2.json" || true
}

mkdir -p "$tmp/reports"
for r in 1 2; do
  for n in $(seq -w 1 24); do
    case "$r$n" in
      107) f=h100-sxm-8gpu-bad ;;
      118) f=h100-gdr-broken ;;
      211) f=h100-penny ;;
      *) f=h100-sxm-8gpu ;;
    esac
    check_as "$f" "r${r}n$n"
  done
done
rm "$tmp/reports/r2n20.json"
head -c 300 "$tmp/reports/r2n05.json" >"$tmp/reports/r2n05.json.cut" && mv "$tmp/reports/r2n05.json.cut" "$tmp/reports/r2n05.json"
# Relative paths: the cut report is named by its path, the same in every run.
(cd "$tmp" && "$bin" sweep reports --expect 'r1n[01-24],r2n[01-24]' --format json >sweep.json) || true
# The sweep's own envelope says when and where it ran: pinned, so the page (and its hash)
# is the same on every machine and second.
python3 - "$tmp/sweep.json" <<'PY'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
d["host"].update(hostname="ops-1", kernel="6.8.0", captured_at="2026-12-06T00:00:00Z")
json.dump(d, open(p, "w"))
PY
(cd "$tmp" && "$bin" report sweep.json --group-by '^(r\d+)n' --title 'fabprobe sweep: racks r1, r2' --html "$out/sweep.html")
shot "$out/sweep.html" "$out/sweep.png" 1000 900

"$bin" report tests/data/html/ring-slow-egress.json --html "$out/ring.html"
shot "$out/ring.html" "$out/ring.png" 1000 1380

"$bin" topo --root fixtures/h100-sxm-8gpu-bad --format json >"$tmp/topo.json" || true
"$bin" check --root fixtures/h100-sxm-8gpu-bad --format json >"$tmp/check.json" || true
# The check first: the picture opens on the findings, the tree they sit in follows.
(cd "$tmp" && "$bin" report check.json topo.json --html "$out/topo.html")
shot "$out/topo.html" "$out/topo.png" 1000 1000
# What each picture was made from: tests/html_report.rs makes the pages again from today's
# binary and fails when a hash differs (a stale picture). WIDTHS="700 1600" also shoots each
# page at those widths (the test's readability check), as NAME-WIDTH.png.
(cd "$out" && sha256sum ring.html sweep.html topo.html >pages.sha256)
for w in ${WIDTHS:-}; do
  for p in ring sweep topo; do shot "$out/$p.html" "$out/$p-$w.png" "$w" 1000; done
done
rm -f "$out"/*.html
ls -l "$out"/*.png

if [ -n "${SWEEP_NODES:-}" ]; then
  rm -rf "$tmp/reports" && mkdir -p "$tmp/reports"
  "$bin" check --root fixtures/h100-sxm-8gpu --format json >"$tmp/good.json" || true
  "$bin" check --root fixtures/h100-sxm-8gpu-bad --format json >"$tmp/bad.json" || true
  for i in $(seq -w 1 "$SWEEP_NODES"); do
    src=good; [ $((10#$i % 97)) = 0 ] && src=bad
    sed "s/\"host\":{\"hostname\":\"[^\"]*\"/\"host\":{\"hostname\":\"gpu$i\"/" "$tmp/$src.json" >"$tmp/reports/gpu$i.json"
  done
  rm "$tmp/reports/gpu$(printf "%0${#SWEEP_NODES}d" 5).json"
  "$bin" sweep "$tmp/reports" --expect "gpu[$(printf "%0${#SWEEP_NODES}d" 1)-$SWEEP_NODES]" --html "$out/sweep-$SWEEP_NODES.html" >/dev/null || true
  wc -c "$out/sweep-$SWEEP_NODES.html"
fi
