#!/usr/bin/env bash
# scripts/build_progress.sh when its output is not a terminal (CI logs): ninja's per-step lines
# are folded into "== LABEL: DONE/TOTAL steps, XmYs" lines at most every period, what else
# ninja says (a warning, an error) passes through, and ninja's exit status is kept. A fake
# `ninja` (a shell function) stands in for the build.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/build_progress.sh"
BUILD_PROGRESS_PERIOD_S=1
fails=0
expect() {  # expect DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=1; fi
}

ninja() {
  for i in 1 2 3 4 5 6; do
    echo "[$i/6] Compiling C++ object step$i.o"
    [ "$i" = 3 ] && echo "../a.cc:1:2: warning: something to see"
    sleep 0.3
  done
  return "${FAKE_NINJA_STATUS:-0}"
}

out=$(build_with_progress "fake build" -C nowhere)
status=$?
echo "$out"
expect "exit status 0 kept" [ "$status" = 0 ]
expect "starts with a line" grep -q '^== fake build: started$' <<<"$out"
expect "no per-step line passes" bash -c '! grep -q "^\[[0-9]*/6\]" <<<"$1"' _ "$out"
expect "the warning passes" grep -q 'warning: something to see' <<<"$out"
expect "a progress line before the end" grep -qE '^== fake build: [1-5]/6 steps, 0m[0-9]+s$' <<<"$out"
expect "the last line has every step and the time" \
  bash -c '[[ $(tail -n 1 <<<"$1") =~ ^==\ fake\ build:\ 6/6\ steps,\ 0m[0-9]+s$ ]]' _ "$out"
expect "short: at most 5 lines for 6 steps" [ "$(wc -l <<<"$out")" -le 5 ]

out=$(FAKE_NINJA_STATUS=3 build_with_progress "failing build" -C nowhere)
status=$?
expect "a failing build's status kept" [ "$status" = 3 ]
exit $fails
