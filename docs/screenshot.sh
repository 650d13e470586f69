#!/usr/bin/env bash
# Regenerates docs/report-quickstart.png, the README's picture of the quickstart's HTML report,
# from a fresh run of the quickstart (so the picture is of what the code does now, not of a run
# of weeks ago), and prints the run's counts and time for the README's first paragraph.
#
#   docs/screenshot.sh            # needs a release build (cargo build --release) and chromium
#
# tests/cli.rs checks that the README's job count is the quickstart's plan.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/meshparity
[ -x "$bin" ] || cargo build --release --bin meshparity
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
MESHPARITY_NO_SHRINK= "$bin" run examples/quickstart.toml --run-dir "$out/run" --no-progress \
    2>"$out/log" >"$out/summary" || true
tail -n 1 "$out/summary"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$out/profile" --hide-scrollbars --window-size=1280,900 \
    --screenshot="$PWD/docs/report-quickstart.png" "file://$out/run/report.html" 2>/dev/null
echo "wrote docs/report-quickstart.png ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
