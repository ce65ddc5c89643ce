#!/usr/bin/env bash
# The tcp transport's two engines (io_uring = tcp, epoll = tcp-poll) next to iperf3 and a plain
# blocking-socket program, in one run: on loopback, then across two network namespaces joined
# through a bridge with tbf egress shaping (../shared/bench/run-netns.sh builds it) at each rate.
#
# Per setting: iperf3, 1 stream, 3 s (host1 -> host0; the yardstick for bandwidth; on loopback
# once more with the congestion control braid's sockets use there, BRAID_LOOPBACK_CC, default
# reno, as "iperf3-reno", for reference); then
# transport_peer_bench bw for each engine and size (server = receiver in host0, client in host1;
# GB/s at the receiver = bytes/s/1e9), then 8-byte ping-pong latency (median of RTT/2; engines
# interleaved over LAT_ROUNDS rounds, median of the rounds).
# "tcp-zc0" is the io_uring engine with BRAID_ZCOPY_BYTES=0 (no zero-copy sends), "socket" is
# blocking send/recv with TCP_NODELAY; "socket@1cpu" runs both of its ends on one CPU;
# "socket-framed" is that socket with braid's frame header and shared-CPU system calls (latency).
# Pinning matters for blocking latency: on this 2-vCPU host a blocking ping-pong measured 2.2 us
# with both ends on one CPU and ~29 us across CPUs (waking an idle vCPU); unpinned, the scheduler
# picks either, so the yardstick was bimodal. Each end is pinned to its own CPU (CPUS="0 1"), as
# on two hosts, and the one-CPU figure is listed too.
#
#   bench/transport_netns.sh                        # loopback + 1gbit + 200mbit, ~3-4 min
#   RATES=1gbit SIZES="65536 1048576" BW_SECONDS=3 LOOPBACK=0 bench/transport_netns.sh
# Needs root (ip netns, tc) and iperf3. Namespaces tnb0, tnb1, tnbsw (10.213.0.1/.2), deleted
# on exit. Output: the table on stdout and in $OUT/table.txt; stderr of every run in $OUT/runs.log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ANCHORS=${ANCHORS:-$ROOT/../shared/bench}
BUILD_DIR=${BUILD_DIR:-build-tnet}
RATES=${RATES-1gbit 200mbit}
SIZES=${SIZES-4096 65536 1048576 16777216}
BW_ENGINES=${BW_ENGINES-tcp tcp-zc0 tcp-poll socket}
LAT_ENGINES=${LAT_ENGINES-tcp tcp-poll socket socket@1cpu}
BW_SECONDS=${BW_SECONDS:-2}
LAT_SECONDS=${LAT_SECONDS:-1}
LAT_ROUNDS=${LAT_ROUNDS:-3}
LOOPBACK=${LOOPBACK:-1}
CPUS=${CPUS-0 1}   # server's and client's CPU (taskset); empty: not pinned
OUT=${OUT:-$ROOT/$BUILD_DIR/transport-netns}
export ANC_NS_PREFIX=tnb ANCHOR_BUILD=$OUT/anchors ANCHOR_RESULTS=$OUT
BIN=$ROOT/$BUILD_DIR/bench/transport/transport_peer_bench
mkdir -p "$OUT"
: > "$OUT/runs.log"
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

[ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" > /dev/null
ninja -C "$BUILD_DIR" -j 2 bench/transport/transport_peer_bench > /dev/null
command -v iperf3 > /dev/null || { log "iperf3 is missing (apt-get install iperf3)"; exit 1; }

NS_UP=0
teardown() { [ "$NS_UP" = 1 ] && "$ANCHORS/run-netns.sh" teardown 2 2> /dev/null; NS_UP=0; }
trap teardown EXIT
trap 'exit 130' INT TERM

PORT=$((42000 + RANDOM % 10000))
SRV=() CLI=() ADDR=127.0.0.1 CADDR=127.0.0.1
ROWS=()

# run_pair SECONDS ARGS... -> the server's and the client's RESULT lines on stdout
run_pair() {
  local secs=$1 env=() engine
  shift
  PORT=$((PORT + 1))
  engine=$(sed -n 's/.*--engine \([^ ]*\).*/\1/p' <<< "$*")
  if [ "$engine" = tcp-zc0 ]; then env=(BRAID_ZCOPY_BYTES=0); set -- "${@/tcp-zc0/tcp}"; fi
  # Each "host" gets its own CPU, as two machines would; "@1cpu" puts both ends on CPU 0.
  local spin=(taskset -c "${CPUS%% *}") cpin=(taskset -c "${CPUS##* }")
  if [[ "$engine" == *@1cpu ]]; then cpin=("${spin[@]}"); set -- "${@/@1cpu/}"; fi
  [ -z "$CPUS" ] && spin=() cpin=()
  local limit; limit=$(awk -v s="$secs" 'BEGIN{printf "%d", s + 30}')
  local sout; sout=$(mktemp "$OUT/server.XXXXXX")
  env "${env[@]}" timeout "$limit" "${SRV[@]}" "${spin[@]}" "$BIN" --role server --addr "$ADDR" --port $PORT "$@" > "$sout" 2>> "$OUT/runs.log" &
  local spid=$!
  env "${env[@]}" timeout "$limit" "${CLI[@]}" "${cpin[@]}" "$BIN" --role client --addr "$ADDR" --port $PORT "$@" 2>> "$OUT/runs.log" || true
  wait $spid || true
  cat "$sout"
  rm -f "$sout"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if (b > 0 && a > 0) printf "%.3f", a / b; else print "-"}'; }

field() { sed -n "s/.*role=$1 .* $2=\([0-9.]*\).*/\1/p" | head -1; }

iperf_gbs() { # [$1 = congestion control for iperf3 -C]
  PORT=$((PORT + 1))
  local cc=()
  [ -n "${1:-}" ] && cc=(-C "$1")
  local spin=() cpin=()
  [ -n "$CPUS" ] && spin=(taskset -c "${CPUS%% *}") cpin=(taskset -c "${CPUS##* }")
  timeout 20 "${SRV[@]}" "${spin[@]}" iperf3 -s -1 -B "$ADDR" -p $PORT > /dev/null 2>&1 &
  local spid=$!
  sleep 0.5
  local mbps
  mbps=$(timeout 20 "${CLI[@]}" "${cpin[@]}" iperf3 -c "$ADDR" -B "$CADDR" -p $PORT -t 3 -f m "${cc[@]}" 2>> "$OUT/runs.log" |
    awk '/receiver/{v=$(NF-2)} END{print v}')
  wait $spid || true
  awk -v m="${mbps:-0}" 'BEGIN{printf "%.4f", m / 8 / 1000}'
}

measure() { # $1 = setting name [$2 = the congestion control braid's sockets use there]
  local setting=$1 cc=${2:-} ref gbs us sock_us engine size
  ref=$(iperf_gbs)
  log "$setting: iperf3 $ref GB/s"
  ROWS+=("$(printf '%-9s %-11s %10s %9s %7s' "$setting" iperf3 - "$ref" 1.000)")
  if [ -n "$cc" ]; then
    # braid's sockets there use another congestion control (BRAID_LOOPBACK_CC): iperf3 with it too,
    # for reference (the ratios stay against plain iperf3, the yardstick the targets name).
    gbs=$(iperf_gbs "$cc")
    log "$setting: iperf3 -C $cc $gbs GB/s"
    ROWS+=("$(printf '%-9s %-11s %10s %9s %7s' "$setting" "iperf3-$cc" - "$gbs" \
      "$(ratio "$gbs" "$ref")")")
  fi
  for engine in $BW_ENGINES; do
    for size in $SIZES; do
      gbs=$(run_pair "$BW_SECONDS" --engine "$engine" --mode bw --size "$size" --seconds "$BW_SECONDS" | field server gbps)
      if [ -z "$gbs" ]; then
        ROWS+=("$(printf '%-9s %-11s %10s %9s %7s' "$setting" "$engine" "$size" FAIL -)")
      else
        ROWS+=("$(printf '%-9s %-11s %10s %9s %7s' "$setting" "$engine" "$size" "$gbs" \
          "$(ratio "$gbs" "$ref")")")
      fi
      log "$setting: $engine bw $size: ${gbs:-FAIL} GB/s"
    done
  done
  # Rounds interleave the engines so a burst of load from elsewhere on the host hits them all;
  # each engine's figure is the median of its rounds' medians.
  local lat=() round vals
  declare -A samples=()
  for ((round = 0; round < LAT_ROUNDS; round++)); do
    for engine in $LAT_ENGINES; do
      us=$(run_pair "$LAT_SECONDS" --engine "$engine" --mode lat --seconds "$LAT_SECONDS" | field client lat_us)
      samples[$engine]+="${us:-} "
      log "$setting: $engine lat round $round: ${us:-FAIL} us"
    done
  done
  for engine in $LAT_ENGINES; do
    vals=${samples[$engine]:-}
    us=$(tr ' ' '\n' <<< "$vals" | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END{if (NR) print v[int((NR+1)/2)]}')
    lat+=("$engine=${us:-FAIL}")
    [ "$engine" = socket ] && sock_us=$us
    log "$setting: $engine lat rounds: $vals-> ${us:-FAIL} us"
  done
  for kv in "${lat[@]}"; do
    us=${kv#*=}
    ROWS+=("$(printf '%-9s %-11s %10s %9s %7s' "$setting" "${kv%%=*}" lat8B "${us}us" \
      "$(ratio "$us" "${sock_us:-}")")")
  done
}

START=$(date +%s)
if [ "$LOOPBACK" = 1 ]; then
  SRV=() CLI=() ADDR=127.0.0.1 CADDR=127.0.0.1
  LOOPBACK_CC=${BRAID_LOOPBACK_CC:-reno}
  measure loopback "$([ "$LOOPBACK_CC" = system ] || echo "$LOOPBACK_CC")"
fi
for RATE in $RATES; do
  "$ANCHORS/run-netns.sh" teardown 2 2> /dev/null || true
  NS_UP=1
  "$ANCHORS/run-netns.sh" setup 2 "$RATE" 2>> "$OUT/runs.log"
  SRV=(ip netns exec tnb0) CLI=(ip netns exec tnb1) ADDR=10.213.0.1 CADDR=10.213.0.2
  measure "$RATE"
  for i in 0 1; do
    printf '%s tnb%s: %s\n' "$RATE" $i "$(tc -s -n tnb$i qdisc show dev aeth0 | tr -s ' \n' ' ')" >> "$OUT/runs.log"
  done
  teardown
done

{
  echo "# transport_peer_bench vs iperf3 ($(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - START)) s; bw ${BW_SECONDS}s/run)"
  echo "# ratio: bw rows = GB/s / iperf3 GB/s of the same setting; lat8B rows = one-way us / socket's"
  printf '%-9s %-11s %10s %9s %7s\n' setting engine size GB/s ratio
  printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/table.txt"
