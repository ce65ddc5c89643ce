#!/usr/bin/env bash
# User-space instructions per 8-byte round trip of transport_peer_bench's latency client, both
# ends on one CPU, counted by callgrind: the difference between a run of 2N and one of N round
# trips, divided by N, so start-up and connection setup cancel out. Exact and repeatable where
# timings on this VM are not; what it counts includes the benchmark loop's own work (two clock
# reads and a vector append per round trip), the same for every engine.
#
#   bench/lat_instructions.sh                              # tcp tcp-poll socket-framed socket
#   BUILD_DIR=build-lead ENGINES="tcp-poll socket-framed" N=5000 bench/lat_instructions.sh
# Needs valgrind (Debian package).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ENGINES=${ENGINES:-tcp tcp-poll socket-framed socket}
N=${N:-10000}
CPU=${CPU:-0}
BIN=$BUILD_DIR/bench/transport/transport_peer_bench
command -v valgrind > /dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
[ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" > /dev/null
ninja -C "$BUILD_DIR" bench/transport/transport_peer_bench > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

count() { # engine iterations -> instructions the client executed
  local port=$((30000 + RANDOM % 20000))
  timeout 120 taskset -c "$CPU" "$BIN" --role server --addr 127.0.0.1 --port $port --engine "$1" --mode lat \
    --seconds 60 --iters "$2" > /dev/null 2>&1 &
  sleep 0.3
  timeout 120 taskset -c "$CPU" valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$BIN" --role client \
    --addr 127.0.0.1 --port $port --engine "$1" --mode lat --seconds 60 --iters "$2" 2>&1 |
    sed -n 's/.*Collected : //p'
  wait
}

printf '%-14s %s\n' engine instructions/round-trip
for e in $ENGINES; do
  a=$(count "$e" "$N")
  b=$(count "$e" $((2 * N)))
  printf '%-14s %s\n' "$e" $(((b - a) / N))
done
