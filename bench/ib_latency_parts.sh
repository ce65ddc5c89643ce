#!/usr/bin/env bash
# bench/ib_latency_parts.sh - where the time of braid's 8 B sendrecv over ib goes, in one boot of
# the emulated Soft-RoCE guest (scripts/rdma_guest.sh). Each round runs, in this order:
#   ib_write_lat 8 B                      perftest's one-way latency (t_typical), the yardstick
#   ib_raw_exchange_bench --pingpong      plain verbs as perftest uses them (inline RDMA WRITE,
#                                         the receiver polling its buffer): half a round trip
#   ib_raw_exchange_bench                 the same with both ends writing at once: the floor
#                                         for an exchange on this machine, whatever the library
#   ib_pingpong_bench                     the transport alone, ping-pong (half round trip)
#   ib_pingpong_bench --exchange          the transport alone, both ends sending at once as the
#                                         two ranks of a sendrecv do (one iteration)
#   the same, 72 B into 64 KiB receives   the runtime's message (64-byte operation header + 8 B)
#                                         into the runtime's roomy first receive
#   braid-perf sendrecv 8 B loop          --barrier 0: each operation issued as the last ended
#   the same with BRAID_SPIN_US=100000    no waiter ever sleeps
#   the same over shm, and over tcp       the runtime without the ib transport (shm: no kernel)
# then once, for rank 0 of the ib loop and for one end of the exchange: CPU per iteration by
# where it went (perf record -e cpu-clock -F 1000, the difference between a run of 22000 and one
# of 2000 iterations divided by 20000, so set-up cancels out).
# Prints the median of each row over the rounds and the median of its per-round ratios to
# ib_write_lat. Only ratios within one boot mean anything (docs/ib.md).
#
#   ROUNDS=3 bench/ib_latency_parts.sh
#   BUILD_DIR=build-ib bench/ib_latency_parts.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BUILD_DIR=$(realpath -m "${BUILD_DIR:-build}")
if [ "${1:-}" != --in-guest ]; then
  export ROUNDS BUILD_DIR
  exec scripts/rdma_guest.sh bash bench/ib_latency_parts.sh --in-guest
fi

pair=scripts/rdma_guest/perftest_pair.sh
perf=$BUILD_DIR/tools/braid_perf/braid-perf
braidrun=$BUILD_DIR/tools/braidrun/braidrun
pingpong=$BUILD_DIR/bench/transport/ib_pingpong_bench
raw=$BUILD_DIR/bench/transport/ib_raw_exchange_bench
for f in "$perf" "$braidrun" "$pingpong" "$raw"; do [ -x "$f" ] || { echo "ib_latency_parts: $f is not built" >&2; exit 1; }; done
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
port=29700

# braid-perf's 8 B sendrecv loop on two ranks (rank 0 on rxe0, rank 1 on rxe1); prints the
# median time in us. $1: a command prefix for rank 0 (perf record), the rest: VAR=value pairs.
loop() {
  local wrap=$1 iters=$2
  shift 2
  port=$((port + 1))
  WRAP0="$wrap" timeout -k 10 300 env "$@" "$braidrun" --nproc-per-node 2 --no-prefix --master-addr 10.99.0.1 \
    --master-port "$port" -- sh -c 'export BRAID_IB_HCA=rxe$LOCAL_RANK BRAID_SOCKET_IFNAME=veth$LOCAL_RANK
      if [ "$LOCAL_RANK" = 0 ]; then exec $WRAP0 "$0" "$@"; else exec "$0" "$@"; fi' \
    "$perf" -T 60 --result-rows --op sendrecv -b 8 -e 8 -n "$iters" -w 30 --barrier 0 -c 0 2>&1 |
    awk -F'\t' '$1 == "RESULT" { print $7; exit }'
}
# ib_pingpong_bench's median (half round trip, or iteration with --exchange).
transport() { timeout -k 5 120 "$pingpong" --iters 2000 "$@" 2>&1 | awk -F'\t' '$1 == "RESULT" { print $2 }'; }
add() { [ -n "$2" ] && echo "$2" >> "$results/$1" || echo "ib_latency_parts: round $round: $1 failed" >&2; }

for round in $(seq "$ROUNDS"); do
  echo "ib_latency_parts: round $round of $ROUNDS" >&2
  add write_lat "$("$pair" ib_write_lat 18601 -s 8 -n 1000 -F | awk '$1 == 8 && $2 ~ /^[0-9]+$/ { print $5; exit }')"
  add raw_pingpong "$(timeout -k 5 120 "$raw" --pingpong | awk -F'\t' '$1 == "RESULT" { print $2 }')"
  add raw_exchange "$(timeout -k 5 120 "$raw" | awk -F'\t' '$1 == "RESULT" { print $2 }')"
  add pingpong "$(transport)"
  add exchange "$(transport --exchange)"
  add exchange_rt "$(transport --exchange --bytes 72 --capacity 65600)"
  add loop_ib "$(loop "" 1000 BRAID_TRANSPORT=ib)"
  add loop_spin "$(loop "" 1000 BRAID_TRANSPORT=ib BRAID_SPIN_US=100000)"
  add loop_shm "$(loop "" 1000 BRAID_TRANSPORT=shm)"
  add loop_tcp "$(loop "" 1000 BRAID_TRANSPORT=tcp)"
done

median() { sort -g "$results/$1" | awk '{ v[NR] = $1 } END { if (NR) printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else printf "-" }'; }
ratio() {  # median over rounds of row / write_lat, rounds paired by line
  paste "$results/$1" "$results/write_lat" 2>/dev/null | awk '{ print $1 / $2 }' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) printf "%.2fx", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else printf "-" }'
}
echo
echo "8 B latency in parts, Soft-RoCE in the emulated guest, $ROUNDS rounds (medians; ratio: median of per-round ratios)"
printf '%-58s %8s %9s\n' "" us "/ib_write_lat"
for row in "write_lat:ib_write_lat 8 B (t_typical)" "raw_pingpong:raw verbs ping-pong 8 B (half round trip)" \
           "raw_exchange:raw verbs exchange 8 B (both write at once)" "pingpong:transport ping-pong 8 B (half round trip)" \
           "exchange:transport exchange 8 B (both send at once)" \
           "exchange_rt:transport exchange 72 B into 64 KiB receives" \
           "loop_ib:braid-perf sendrecv 8 B loop over ib" "loop_spin:  the same, BRAID_SPIN_US=100000" \
           "loop_shm:braid-perf sendrecv 8 B loop over shm" "loop_tcp:braid-perf sendrecv 8 B loop over tcp"; do
  printf '%-58s %8s %9s\n' "${row#*:}" "$(median "${row%%:*}")" "$(ratio "${row%%:*}")"
done

# CPU per iteration by where it ran: one perf sample per ms of CPU, so the difference in samples
# between the long and the short run * 1000 / 20000 is us per iteration (/2: the exchange's two
# ends are two threads of one process). Per DSO, then the symbols that take most.
profile() {  # label divisor
  local label=$1 div=$2 f
  for f in short long; do
    perf report -i "$results/$f.data" -n --no-children --sort dso,sym --stdio 2>/dev/null |
      awk '$1 ~ /%$/ { k = $3; s = ""; for (i = 5; i <= NF; i++) s = s " " $i; print $2 "\t" k "\t" substr(s, 2, 50) }' > "$results/$f.txt"
  done
  echo
  echo "$label: CPU us per iteration (cpu-clock; it reads high under emulation, compare shares)"
  awk -F'\t' -v d="$div" 'NR == FNR { s[$2 "\t" $3] = $1; next }
       { u = ($1 - s[$2 "\t" $3]) * 1000 / 20000 / d; dso[$2] += u; sym[$2 " " $3] = u; t += u }
       END { for (k in dso) if (dso[k] >= 0.5) printf "  %-40s %6.1f\n", k, dso[k] | "sort -k2 -gr"; close("sort -k2 -gr")
             printf "  %-40s %6.1f\n", "all", t
             for (k in sym) if (sym[k] >= 1) printf "    %-52s %6.1f\n", k, sym[k] | "sort -k3 -gr" }' \
    "$results/short.txt" "$results/long.txt"
}
if command -v perf > /dev/null; then
  for f in short long; do
    n=$([ "$f" = short ] && echo 2000 || echo 22000)
    t=$(loop "perf record -q -e cpu-clock -F 1000 -o $results/$f.data" "$n" BRAID_TRANSPORT=ib)
  done
  profile "braid-perf sendrecv loop over ib, rank 0 (both its threads; ${t} us per iteration while profiled)" 1
  for f in short long; do
    n=$([ "$f" = short ] && echo 2000 || echo 22000)
    t=$(perf record -q -e cpu-clock -F 1000 -o "$results/$f.data" "$pingpong" --iters "$n" --exchange --bytes 72 \
      --capacity 65600 2>&1 | awk -F'\t' '$1 == "RESULT" { print $2 }')
  done
  profile "transport exchange 72 B into 64 KiB receives, per end (${t} us per iteration while profiled)" 2
fi

# The transport's own code per round trip of the ping-pong (both ends: two messages sent, two
# received): user-space instructions counted by callgrind, the difference between 600 and 200
# round trips divided by 400. Exact where timings are not; under emulation every instruction
# costs time. The provider's (librxe) and libc's share are in the total.
if command -v valgrind > /dev/null; then
  for n in 200 600; do
    BRAID_SPIN_US=0 timeout -k 5 300 valgrind --tool=callgrind --callgrind-out-file="$results/cg$n" "$pingpong" \
      --iters "$n" --warmup 20 > /dev/null 2>&1 || echo "ib_latency_parts: callgrind run of $n failed" >&2
  done
  echo
  echo "transport ping-pong: user-space instructions per round trip (callgrind; both ends, 2 messages)"
  for n in 200 600; do
    callgrind_annotate "$results/cg$n" 2>/dev/null |
      sed -nE 's/^ *([0-9,]+) +\( *[0-9.]+%\) +(.*)$/\1\t\2/p' | sed -E 's/ \[[^]]*\]$//' | tr -d , > "$results/cg$n.txt"
  done
  awk -F'\t' 'NR == FNR { s[$2] += $1; next } { l[$2] += $1 }
       END { for (k in l) { d = (l[k] - s[k]) / 400; if (k == "PROGRAM TOTALS") printf "  %7.0f  all\n", d
                            else if (d >= 100) printf "  %7.0f    %s\n", d, substr(k, 1, 90) | "sort -gr" } }' \
    "$results/cg200.txt" "$results/cg600.txt"
fi
