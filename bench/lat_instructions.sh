#!/usr/bin/env bash
# User-space instructions per 8-byte round trip of transport_peer_bench's latency ping-pong,
# each end counted by callgrind (client and server columns), both ends on one CPU: the
# difference between a run of 2N and one of N round trips, divided by N, so start-up and
# connection setup cancel out. Exact and repeatable where timings on this VM are not; the
# client's count includes the benchmark loop's own work (two clock reads and a vector append
# per round trip), the same for every engine. WORK=K passes --work K to socket-framed (3K more
# instructions per round trip on each end; bench/lat_budget.sh times it).
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
WORK=${WORK:-0}
BIN=$BUILD_DIR/bench/transport/transport_peer_bench
command -v valgrind > /dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
[ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" > /dev/null
ninja -C "$BUILD_DIR" bench/transport/transport_peer_bench > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

count() { # role engine iterations -> instructions that end executed
  local role=$1 engine=$2 iters=$3 port=$((30000 + RANDOM % 20000)) extra=()
  [ "$engine" = socket-framed ] && extra=(--work "$WORK")
  local run=("$BIN" --addr 127.0.0.1 --port "$port" --engine "$engine" --mode lat
             --seconds 60 --iters "$iters" "${extra[@]}")
  local pin=(taskset -c "$CPU") grind=(taskset -c "$CPU" valgrind --tool=callgrind --callgrind-out-file="$tmp/out")
  if [ "$role" = client ]; then
    timeout 120 "${pin[@]}" "${run[@]}" --role server > /dev/null 2>&1 &
    sleep 0.3
    timeout 120 "${grind[@]}" "${run[@]}" --role client 2>&1 | sed -n 's/.*Collected : //p'
  else  # the client's connect retries until the slower, counted server listens
    timeout 120 "${grind[@]}" "${run[@]}" --role server 2>&1 | sed -n 's/.*Collected : //p' &
    timeout 120 "${pin[@]}" "${run[@]}" --role client > /dev/null 2>&1
  fi
  wait
}

printf '%-14s %8s %8s   (instructions per round trip)\n' engine client server
for e in $ENGINES; do
  row=()
  for role in client server; do
    a=$(count $role "$e" "$N")
    b=$(count $role "$e" $((2 * N)))
    row+=($(((b - a) / N)))
  done
  printf '%-14s %8s %8s\n' "$e" "${row[@]}"
done
