#!/usr/bin/env bash
# tests/ib/runner_test.sh - on the host, no guest: the ib suite's runner (run_ib_tests.sh) counts
# and reports each program right, keeps arguments whole, kills a program past its bound and
# fails the run when one failed; scripts/rdma_guest.sh refuses bad settings and skips (77, one
# line) when qemu is missing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runner=$here/run_ib_tests.sh
guest=$here/../../scripts/rdma_guest.sh
failures=0
check() {  # description, then a command that must succeed
  local what=$1
  shift
  if "$@"; then echo "ok - $what"; else echo "not ok - $what"; failures=$((failures + 1)); fi
}

out=$("$runner" true --- sh -c 'echo "[$1]"' sh 'two words' --- sh -c 'exit 77'); status=$?
check "all pass or skip: status 0" [ $status = 0 ]
check "an argument with a space arrives whole" grep -qx '\[two words\]' <<< "$out"
check "summary counts 2 passed, 1 skipped" grep -q '2 passed, 0 failed, 1 skipped' <<< "$out"

out=$("$runner" false --- true --- sh -c 'exit 3'); status=$?
check "a failing program fails the run" [ $status = 1 ]
check "each failure named with its status" grep -q 'FAIL sh -c exit 3 (exit status 3' <<< "$out"
check "summary counts 1 passed, 2 failed" grep -q '1 passed, 2 failed, 0 skipped' <<< "$out"

out=$(BRAID_IB_TEST_TIMEOUT_S=1 "$runner" sleep 30); status=$?
check "a program past BRAID_IB_TEST_TIMEOUT_S is killed and fails" \
  grep -q 'FAIL sleep 30 (killed after 1 s' <<< "$out"
check "...and the run fails" [ $status = 1 ]

"$runner" >/dev/null 2>&1; status=$?
check "no program: usage, status 2" [ $status = 2 ]

err=$(BRAID_GUEST_QEMU=/nonexistent/qemu "$guest" true 2>&1); status=$?
check "no qemu: status 77" [ $status = 77 ]
check "no qemu: one line saying so" [ "$(wc -l <<< "$err")" = 1 ]
check "no qemu: the line names qemu" grep -q 'qemu not found' <<< "$err"

BRAID_GUEST_TIMEOUT_S=soon "$guest" true >/dev/null 2>&1; status=$?
check "a bad BRAID_GUEST_TIMEOUT_S: status 2" [ $status = 2 ]
"$guest" >/dev/null 2>&1; status=$?
check "no command: usage, status 2" [ $status = 2 ]

[ $failures = 0 ] || { echo "$failures check(s) failed"; exit 1; }
