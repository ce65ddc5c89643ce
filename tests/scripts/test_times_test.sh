#!/usr/bin/env bash
# scripts/test_times.py, which scripts/test.sh runs after each meson test: from meson's
# testlog.json, each suite's tests added up (longest suite first, with the count of tests that
# did not pass) and the slowest tests. Fed a log written here, with known durations, in both
# forms meson writes: the suite in the test's name only, and also in a "suite" list.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
fails=0
expect() {  # expect DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=1; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/testlog.json" <<'JSON'
{"name": "braid:store / store", "duration": 5.25, "result": "OK"}
{"name": "braid:runtime-async / async", "duration": 91.5, "result": "OK"}
{"name": "lifetime", "suite": ["braid:runtime-async"], "duration": 2.0, "result": "FAIL"}
{"name": "store_auth", "suite": ["braid:store"], "duration": 1.5, "result": "SKIP"}
{"name": "docs", "suite": ["braid:docs"], "duration": 1.0, "result": "OK"}
JSON
out=$(python3 "$root/scripts/test_times.py" "$tmp/testlog.json" "full tests" --slowest 2)
status=$?
echo "$out"
expect "exit status 0" [ "$status" = 0 ]
expect "a heading with the count and the total" grep -q '^== full tests: 5 tests, 101 s of test time by suite$' <<<"$out"
expect "the longest suite first, with what did not pass" \
  bash -c '[ "$(sed -n 2p <<<"$1" | tr -s " ")" = " runtime-async 93.5 s 2 tests, 1 not passed" ]' _ "$out"
expect "a skip is not a failure" bash -c '[ "$(sed -n 3p <<<"$1" | tr -s " ")" = " store 6.8 s 2 tests" ]' _ "$out"
expect "the slowest two, slowest first" \
  bash -c 'grep -A2 "the 2 slowest" <<<"$1" | tail -2 | awk "{print \$3}" | paste -sd, - | grep -qx "async,store"' _ "$out"
python3 "$root/scripts/test_times.py" "$tmp/missing.json" x >/dev/null 2>"$tmp/err"
status=$?
expect "a missing log is an error" [ "$status" -ne 0 ]
expect "naming the file" grep -q "cannot read .*missing.json" "$tmp/err"
exit $fails
