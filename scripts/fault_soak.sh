#!/usr/bin/env bash
# The fault soak (tests/runtime/faults/fault_soak_test.cc) with more trials than CI runs, and its
# outcome table in docs/fault_soak.md's format:
#   scripts/fault_soak.sh                 # 5 trials per fault
#   TRIALS=50 SEED=3 scripts/fault_soak.sh
# Needs root (network namespaces, tc/iptables) and a build in $BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ninja -C "$BUILD_DIR" tests/runtime/faults/fault_soak_test tests/runtime/faults/fault_rank >/dev/null
table=$(mktemp)
trap 'rm -f "$table"' EXIT
FAULT_RANK="$PWD/$BUILD_DIR/tests/runtime/faults/fault_rank" FAULT_SOAK_TRIALS=${TRIALS:-5} \
  FAULT_SOAK_SEED=${SEED:-1} FAULT_SOAK_TABLE="$table" \
  "$BUILD_DIR/tests/runtime/faults/fault_soak_test" >&2
cat "$table"
