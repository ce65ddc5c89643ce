#!/usr/bin/env bash
# What spinning before sleeping costs and buys: BRAID_SPIN_US at 0, the default and a large value,
# for both tcp engines (tcp = io_uring, tcp-poll = epoll), side by side in one run, interleaved
# over rounds (bench/transport/spin_cost_bench.cc says what each column means).
#
#   bench/spin_cost.sh                                   # ~1.5 min on 2 idle CPUs
#   SPINS=0,default,200,5000 THINK_US=50 ROUNDS=7 bench/spin_cost.sh
#
# The figures are only worth something on a quiet machine: the script waits (up to MAX_WAIT_S)
# for the 1-minute load average to drop below MAX_LOAD, and prints the load it ran under.
# Output: the table on stdout and in $OUT/table.md; per-run lines in $OUT/runs.log.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-spin}
ENGINES=${ENGINES:-tcp,tcp-poll}
SPINS=${SPINS:-0,default,1000}
LAYOUTS=${LAYOUTS:-shared,apart}
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-1}
THINK_US=${THINK_US:-200}
MAX_LOAD=${MAX_LOAD:-1.5}
MAX_WAIT_S=${MAX_WAIT_S:-600}
OUT=${OUT:-$BUILD_DIR/spin-cost}
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

[ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" > /dev/null
ninja -C "$BUILD_DIR" -j 2 bench/transport/spin_cost_bench > /dev/null
mkdir -p "$OUT"

load1() { cut -d' ' -f1 /proc/loadavg; }
waited=0
while awk -v l="$(load1)" -v m="$MAX_LOAD" 'BEGIN{exit !(l > m)}'; do
  if [ "$waited" -ge "$MAX_WAIT_S" ]; then
    log "load is still $(load1) after ${MAX_WAIT_S}s; measuring anyway (figures are suspect)"
    break
  fi
  log "1-minute load $(load1) > $MAX_LOAD: waiting for a quieter machine"
  sleep 30
  waited=$((waited + 30))
done

before=$(cat /proc/loadavg)
log "load before: $before"
"$BUILD_DIR/bench/transport/spin_cost_bench" --engines "$ENGINES" --spins "$SPINS" --layouts "$LAYOUTS" \
  --rounds "$ROUNDS" --seconds "$SECONDS_PER_RUN" --think-us "$THINK_US" 2> "$OUT/runs.log" | tee "$OUT/table.md"
after=$(cat /proc/loadavg)
{
  echo
  echo "load average before: $before; after: $after (the benchmark itself keeps ~2 CPUs busy)"
} | tee -a "$OUT/table.md"
