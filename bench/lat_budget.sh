#!/usr/bin/env bash
# What user-space instructions cost an 8-byte ping-pong whose two ends share one CPU: the
# framed blocking socket (transport_peer_bench --engine socket-framed) with --work K, K turns of
# an empty loop (3 instructions) per message on each end, timed beside the engines and the plain
# blocking socket, interleaved rounds, medians of the one-way latency. Where the framed socket
# with as much added work as braid's bookkeeping (bench/lat_instructions.sh: the difference of
# the two, per end) matches an engine, instructions are what the engine loses there, not the
# kernel path or the way it waits.
#
#   bench/lat_budget.sh                                    # WORKS="0 130 260", 10 rounds
#   BUILD_DIR=build-lead ROUNDS=6 WORKS="0 260" bench/lat_budget.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ROUNDS=${ROUNDS:-10}
WORKS=${WORKS:-0 130 260}
ITERS=${ITERS:-300000}
CPU=${CPU:-0}
BIN=$BUILD_DIR/bench/transport/transport_peer_bench
[ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" > /dev/null
ninja -C "$BUILD_DIR" bench/transport/transport_peer_bench > /dev/null

once() { # engine [--work K] -> one-way latency in us
  local port=$((30000 + RANDOM % 20000))
  local run=("$BIN" --addr 127.0.0.1 --port "$port" --mode lat --seconds 5 --iters "$ITERS" --engine "$@")
  timeout 60 taskset -c "$CPU" "${run[@]}" --role server > /dev/null 2>&1 &
  timeout 60 taskset -c "$CPU" "${run[@]}" --role client 2>&1 | sed -n 's/.*lat_us=\([0-9.]*\).*/\1/p'
  wait
}

configs=(socket tcp-poll tcp)
for k in $WORKS; do configs+=("socket-framed --work $k"); done
declare -A got
for ((r = 0; r < ROUNDS; r++)); do
  for c in "${configs[@]}"; do
    # shellcheck disable=SC2086  # the config is an engine and its options
    v=$(once $c)
    [ -n "$v" ] || { echo "no result from: $c" >&2; exit 1; }
    got[$c]+="$v "
  done
done
printf '%-26s %8s %8s %8s   (one-way us, both ends on CPU %s, %s rounds)\n' config median min max "$CPU" "$ROUNDS"
for c in "${configs[@]}"; do
  echo "${got[$c]}" | tr ' ' '\n' | sed '/^$/d' | sort -n |
    awk -v c="$c" '{a[NR] = $1} END {m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2;
                   printf "%-26s %8.3f %8.2f %8.2f\n", c, m, a[1], a[NR]}'
done
