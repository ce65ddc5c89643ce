#!/usr/bin/env bash
# tests/ib/run_ib_tests.sh PROG [ARGS...] [--- PROG [ARGS...]]... - runs each program in turn
# inside one boot of the Soft-RoCE guest (meson's ib_guest test: scripts/rdma_guest.sh
# tests/ib/run_ib_tests.sh ...), prints PASS, FAIL or SKIP (exit 77) for each with its time,
# then a summary; exits 1 when any failed. Programs are separated by a lone "---". Each is
# bounded by BRAID_IB_TEST_TIMEOUT_S (default 600): past it, it is killed and counts as failed.
set -uo pipefail
limit=${BRAID_IB_TEST_TIMEOUT_S:-600}
passed=() failed=() skipped=()

run_one() {
  local name="${1##*/}${2:+ ${*:2}}" t0 t1 status
  echo "=== ib_guest: $name"
  t0=$(date +%s.%N)
  timeout -k 10 "$limit" "$@"
  status=$?
  t1=$(date +%s.%N)
  local took
  took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f s", b - a }')
  case $status in
    0) echo "--- PASS $name ($took)"; passed+=("$name") ;;
    77) echo "--- SKIP $name ($took)"; skipped+=("$name") ;;
    124) echo "--- FAIL $name (killed after $limit s, BRAID_IB_TEST_TIMEOUT_S)"; failed+=("$name") ;;
    *) echo "--- FAIL $name (exit status $status, $took)"; failed+=("$name") ;;
  esac
}

[ $# -gt 0 ] || { echo "usage: run_ib_tests.sh PROG [ARGS...] [--- PROG [ARGS...]]..." >&2; exit 2; }
cmd=()
for arg in "$@" ---; do
  if [ "$arg" = --- ]; then
    [ ${#cmd[@]} -gt 0 ] && run_one "${cmd[@]}"
    cmd=()
  else
    cmd+=("$arg")
  fi
done

echo "=== ib_guest: ${#passed[@]} passed, ${#failed[@]} failed, ${#skipped[@]} skipped"
[ ${#failed[@]} -eq 0 ] || { printf '  failed: %s\n' "${failed[@]}"; exit 1; }
[ ${#skipped[@]} -eq 0 ] || printf '  skipped: %s\n' "${skipped[@]}"
exit 0
