#!/usr/bin/env bash
# scripts/package_lock.sh: setup.sh waits for a held package-manager lock, naming the process
# that holds it, and gives up with a clear line after its bound. A python process holds an
# fcntl lock (as apt and dpkg take theirs) on a file of this test's own.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/package_lock.sh"
dir=$(mktemp -d)
holder=""
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$dir"' EXIT
lock_files=("$dir/missing" "$dir/lock")
fails=0
expect() {  # expect DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fails=1; fi
}

hold_lock() {  # hold_lock SECONDS: starts a holder, returns once it holds the lock
  rm -f "$dir/held"
  python3 -c '
import fcntl, sys, time
f = open(sys.argv[1], "w"); fcntl.lockf(f, fcntl.LOCK_EX)
open(sys.argv[2], "w").close(); time.sleep(float(sys.argv[3]))' "$dir/lock" "$dir/held" "$1" &
  holder=$!
  while [ ! -e "$dir/held" ]; do sleep 0.05; done
}

expect "nothing held: no wait" bash -c '. "$1"; lock_files=("$2"); wait_for_package_lock' _ \
  "$root/scripts/package_lock.sh" "$dir/lock"

hold_lock 3
lock_timeout_s=30
wait_for_package_lock 2>"$dir/err"
status=$?
cat "$dir/err"
expect "waits until the holder lets go" [ "$status" = 0 ]
expect "names the holder's PID and the bound" \
  grep -q "waiting for the package manager lock held by PID $holder (python3) (up to 30 s)" "$dir/err"

hold_lock 60
lock_timeout_s=2
wait_for_package_lock 2>"$dir/err"
status=$?
cat "$dir/err"
expect "gives up after its bound" [ "$status" = 1 ]
expect "says who still holds it" grep -q "still held by PID $holder after 2 s" "$dir/err"
exit $fails
