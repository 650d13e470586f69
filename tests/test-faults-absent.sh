#!/usr/bin/env bash
# The binary users build (`cargo build`, `cargo run`, `cargo install`: no dev-dependencies, so no
# `test-faults` feature) must ignore MESHPARITY_TEST_FAULT. With the switch compiled in,
# `*=exit:7` makes every job an infrastructure error (exit 3) and `*=noop` passes every job,
# mutation jobs included, without computing anything ("no-op (test fault)" in results.json).
# Usage: tests/test-faults-absent.sh BINARY   (.ci/run passes target/debug/meshparity after a
# plain `cargo build --bin meshparity`).
set -euo pipefail
bin=$(realpath "${1:?usage: $0 BINARY}")
spec=$(realpath "$(dirname "$0")/../examples/quickstart.toml")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "test-faults-absent: FAILED: $*" >&2; exit 1; }

for fault in '*=exit:7' '*=noop'; do
    dir="$work/run-${fault//[^a-z0-9]/_}"
    set +e
    MESHPARITY_TEST_FAULT="$fault" "$bin" run "$spec" -f mesh=dp2 --no-progress \
        --run-dir "$dir" >"$work/out.log" 2>&1
    code=$?
    set -e
    [ "$code" -eq 0 ] || { tail -20 "$work/out.log" >&2; fail "MESHPARITY_TEST_FAULT='$fault': exit $code, want 0"; }
    python3 - "$dir/results.json" "$fault" <<'EOF'
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
mutations = [j for j in jobs if "/mutation[" in j["name"]]
assert mutations, "no mutation job ran"
for j in jobs:
    assert j["status"] == "passed", f"{j['name']}: {j['status']}"
    assert "test fault" not in j["summary"], f"{j['name']} obeyed {sys.argv[2]}: {j['summary']}"
# A mutation job that computed something has levels with compared values behind its verdict.
for j in mutations:
    levels = (j.get("detail") or {}).get("levels") or []
    assert any(c["compared"] > 0 for l in levels for c in l["comparisons"]), j["name"]
print(f"MESHPARITY_TEST_FAULT='{sys.argv[2]}' ignored: {len(jobs)} jobs computed and passed, "
      f"{len(mutations)} mutations caught")
EOF
done
echo "test-faults-absent: ok, the built binary has no test fault switch"
