#!/usr/bin/env bash
# The long forms of the fault soaks that CI runs short:
# - tests/runtime/faults/fault_soak_test.cc (ranks in network namespaces, one fault each trial),
#   with more trials per fault than CI's one; its outcome table, in docs/fault_soak.md's format,
#   goes to standard output;
# - AsyncKill.EverySurvivorFailsFastNamingTheDeadRank (tests/runtime/async/async_test.cc, a
#   random rank killed at a random point), with more trials than CI's 6.
#   scripts/fault_soak.sh                 # 5 trials per fault, 20 kills
#   TRIALS=50 KILLS=100 SEED=3 scripts/fault_soak.sh
# Needs root (network namespaces, tc/iptables) and a build in $BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ninja -C "$BUILD_DIR" tests/runtime/faults/fault_soak_test tests/runtime/faults/fault_rank \
  tests/runtime/async/async_test tests/runtime/async/async_rank >/dev/null
table=$(mktemp)
trap 'rm -f "$table"' EXIT
FAULT_RANK="$PWD/$BUILD_DIR/tests/runtime/faults/fault_rank" FAULT_SOAK_TRIALS=${TRIALS:-5} \
  FAULT_SOAK_SEED=${SEED:-1} FAULT_SOAK_TABLE="$table" \
  "$BUILD_DIR/tests/runtime/faults/fault_soak_test" >&2
ASYNC_RANK="$PWD/$BUILD_DIR/tests/runtime/async/async_rank" ASYNC_KILL_TRIALS=${KILLS:-20} \
  "$BUILD_DIR/tests/runtime/async/async_test" --gtest_filter='AsyncKill.EverySurvivorFailsFastNamingTheDeadRank' >&2
cat "$table"
