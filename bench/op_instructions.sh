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
#   MPI=1 BYTES=4096 OPS=all_reduce bench/op_instructions.sh   # and Open MPI's, the same way
# MPI=1 adds Open MPI's MPI_Allreduce (vader, in place: ../shared/bench/src/mpi_bench.c, float32
# sum) counted the same way: rank 0 under callgrind, only inside PMPI_Allreduce, the difference
# between 3N and N iterations. Only all_reduce has an Open MPI row. braid's all_reduce row is the
# mean of its out-of-place and in-place forms. Open MPI's ranks poll without sleeping, so while
# rank 1 waits for a CPU (other work on the machine) rank 0's polls count too: measure on a quiet
# machine.
# Needs valgrind (Debian package); MPI=1 also mpicc and mpirun (BRAID_SETUP_ANCHORS=1 scripts/setup.sh).
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
MPI=${MPI:-0}
ANCHORS=${ANCHORS:-$(cd "$(dirname "$0")/../.." && pwd)/shared/bench}
[ -d "$ANCHORS" ] || ANCHORS=/work/shared/bench
if [ "$MPI" = 1 ]; then
  command -v mpicc > /dev/null && command -v mpirun > /dev/null || { echo "MPI=1: mpicc/mpirun missing (BRAID_SETUP_ANCHORS=1 scripts/setup.sh)" >&2; exit 1; }
  mpicc -O2 -o "$tmp/mpi_bench" "$ANCHORS/src/mpi_bench.c" -lm
fi

count_mpi() { # iterations -> instructions rank 0 executed inside MPI_Allreduce
  timeout 600 mpirun --allow-run-as-root -np 2 --mca btl self,vader sh -c \
    'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then exec valgrind --tool=callgrind --toggle-collect=PMPI_Allreduce --callgrind-out-file="'"$tmp"'/mpi_out" "$0" "$@"; else exec "$0" "$@"; fi' \
    "$tmp/mpi_bench" --min-bytes "$BYTES" --max-bytes "$BYTES" --min-iters "$1" --max-iters "$1" 2>&1 | sed -n 's/.*Collected : //p'
}

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
if [ "$MPI" = 1 ] && [ "$BYTES" -ge 4 ]; then
  best=""
  for _ in $(seq "$REPEAT"); do
    short=$(count_mpi "$N")
    long=$(count_mpi $((3 * N)))
    [ -n "$short" ] && [ -n "$long" ] || { echo "Open MPI: a run failed" >&2; continue; }
    per=$(((long - short) / (2 * N)))
    [ -z "$best" ] || [ "$per" -lt "$best" ] && best=$per
  done
  [ -n "$best" ] && printf '%-12s %10s %14d\n' "openmpi:all_reduce" "$BYTES" "$best"
fi
