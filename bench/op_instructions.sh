#!/usr/bin/env bash
# User-space instructions per small operation on the caller's side, counted by callgrind: rank 0
# of a 2-rank braid-perf run under valgrind, only inside braid-perf's timed call (its *_async call
# and Work::wait(), or the group of them: --toggle-collect on run_blocking), the difference
# between a run of 3N and one of N timed iterations, divided by the operations of 2N iterations,
# so warm-up cancels out. braid-perf times an out-of-place and an in-place form of each
# collective (sendrecv has only the first): an iteration is two operations, one of sendrecv.
# (Before 2026-11-29 the script divided by 2N alone: its collective figures were per two
# operations.)
# Exact and repeatable where timings on these machines are not; what the instructions cost
# depends on the machine (under the emulated guest of scripts/rdma_guest.sh they are a large
# part of a small operation's time: docs/ib.md). Rank 0 also counts its polls while it waits for
# rank 1, which vary from run to run: the lowest of REPEAT measurements is printed.
#
#   bench/op_instructions.sh                                   # shm: sendrecv, all_reduce, 8 B
#   BUILD_DIR=build TRANSPORT=tcp OPS="sendrecv" N=1000 bench/op_instructions.sh
# Needs valgrind (Debian package).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
TRANSPORT=${TRANSPORT:-shm}
OPS=${OPS:-sendrecv all_reduce}
N=${N:-500}
REPEAT=${REPEAT:-3}
BYTES=${BYTES:-8}
command -v valgrind > /dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
perf=$BUILD_DIR/tools/braid_perf/braid-perf
braidrun=$BUILD_DIR/tools/braidrun/braidrun
[ -x "$perf" ] && [ -x "$braidrun" ] || { echo "build $BUILD_DIR first (braid-perf, braidrun)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

count() { # op iterations -> instructions rank 0 executed
  local op=$1 iters=$2
  BENCH_TOGGLE='*run_blocking*' BRAID_TRANSPORT=$TRANSPORT timeout 600 "$braidrun" --standalone --nproc-per-node 2 -- sh -c \
    'if [ "$LOCAL_RANK" = 0 ]; then exec valgrind --tool=callgrind --toggle-collect="$BENCH_TOGGLE" --callgrind-out-file="'"$tmp"'/out" "$0" "$@"; else exec "$0" "$@"; fi' \
    "$perf" --op "$op" -b "$BYTES" -e "$BYTES" -n "$iters" -w 10 -c 0 2>&1 | sed -n 's/.*Collected : //p'
}

printf '%-12s %10s %14s\n' op bytes "instr/op"
for op in $OPS; do
  best=""
  for _ in $(seq "$REPEAT"); do
    short=$(count "$op" "$N")
    long=$(count "$op" $((3 * N)))
    [ -n "$short" ] && [ -n "$long" ] || { echo "$op: a run failed" >&2; continue; }
    forms=2
    case $op in sendrecv | barrier) forms=1 ;; esac  # no in-place form
    per=$(((long - short) / (2 * N * forms)))
    [ -z "$best" ] || [ "$per" -lt "$best" ] && best=$per
  done
  [ -n "$best" ] && printf '%-12s %10s %14d\n' "$op" "$BYTES" "$best"
done
