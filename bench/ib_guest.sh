#!/usr/bin/env bash
# bench/ib_guest.sh - braid-perf over ib against perftest on the same two Soft-RoCE devices, from
# one boot of the emulated guest (scripts/rdma_guest.sh), in interleaved rounds: each round runs
#   ib_write_bw 4 MiB (rxe0 -> rxe1)   then braid-perf broadcast 4 MiB, 2 ranks (one-way bandwidth)
#   ib_write_lat 8 B                   then braid-perf sendrecv 8 B and all_reduce 8 B (latency),
#                                      and sendrecv 8 B in a loop without barriers (--barrier 0),
#                                      and sendrecv 8 B again as two "hosts" (below)
#   ib_pingpong_bench 8 B: the ib transport alone, below the runtime (half round trip), into
#     8-byte receives and into receives with room for 64 KiB (as the runtime posts its first
#     receive of an operation; the row is n/a with a bench that predates --capacity), and the
#     exchange of a 2-rank sendrecv (--exchange: both ends send at once; one iteration)
#   braid-perf all_reduce 4 MiB, 2 ranks (busbw)
# Each braid-perf rank is one "host": rank 0 on rxe0/veth0 (10.99.0.1), rank 1 on rxe1/veth1
# (10.99.0.2), started by braidrun with BRAID_IB_HCA and BRAID_SOCKET_IFNAME set per local rank.
# The two-"hosts" rows start them as a job of two nodes instead: one braidrun per device, each
# with one rank (--nnodes 2 --nproc-per-node 1, rendezvous at 10.99.0.1); BRAID_SECRET is set for
# the job (braidrun invents one only when it starts every rank itself). In the first row each
# braidrun and its rank are confined with taskset to a vCPU of their own (node 0 to CPU 0, node 1
# to CPU 1), as two machines with one rank each would run them; in the second, as braidrun
# leaves a node's only rank: free on every CPU, here the same two vCPUs for both "hosts" (one
# kernel: the runtime sees one host, docs/ib.md).
# ROWS=latency runs only the latency rows (ib_write_lat and braid-perf's 8 B runs), for A/B runs
# of several builds in one boot. COUNTS=1 adds, after the rounds, what one iteration of the
# two-braidrun sendrecv (a rank and vCPU each; a barrier and the sendrecv) costs guest-wide in
# thread switches and system calls: perf stat -a around a run of 500 iterations and one of 3000,
# the difference divided by 2500 (both ranks together; needs perf in the guest).
# Prints best and median over the rounds and the ratios braid/perftest (targets: bandwidth >=
# 0.9x ib_write_bw, latency <= 1.3x ib_write_lat). Emulation is slow and noisy: only ratios from
# one run mean anything.
#
#   bench/ib_guest.sh                          # 5 rounds, braid from build/
#   ROUNDS=3 BUILD_DIR=build-ib bench/ib_guest.sh
#   BRAID_PERF_TRANSPORT=tcp bench/ib_guest.sh # braid's half over tcp (no ib transport needed)
# Without the ib transport in the build (braid-perf --version: "ib no"), braid's rows read
# "n/a (ib transport not built)" and only perftest runs. Exit 77 when the guest cannot boot.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
ROWS=${ROWS:-all}
COUNTS=${COUNTS:-0}
BUILD_DIR=$(realpath -m "${BUILD_DIR:-build}")
TRANSPORT=${BRAID_PERF_TRANSPORT:-ib}

if [ "${1:-}" != --in-guest ]; then
  export ROUNDS ROWS COUNTS BUILD_DIR BRAID_PERF_TRANSPORT=$TRANSPORT
  exec scripts/rdma_guest.sh bash bench/ib_guest.sh --in-guest
fi

pair=scripts/rdma_guest/perftest_pair.sh
perf=$BUILD_DIR/tools/braid_perf/braid-perf
braidrun=$BUILD_DIR/tools/braidrun/braidrun
pingpong=$BUILD_DIR/bench/transport/ib_pingpong_bench  # built with -Dbenchmarks=true and ib
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

braid_missing=""
if [ ! -x "$perf" ] || [ ! -x "$braidrun" ]; then
  braid_missing="braid-perf not built in $BUILD_DIR"
elif [ "$TRANSPORT" = ib ] && ! "$perf" --version | grep -q 'ib yes'; then
  braid_missing="ib transport not built"
fi

# One braid-perf run with two ranks; appends the RESULT row's field $2 (times $3) to file $1.
braid() {
  local file=$1 field=$2 scale=$3 port=$4
  shift 4
  local out
  if out=$(timeout -k 10 300 "$braidrun" --nproc-per-node 2 --no-prefix --master-addr 10.99.0.1 \
             --master-port "$port" -- sh -c \
             'BRAID_IB_HCA=rxe$LOCAL_RANK BRAID_SOCKET_IFNAME=veth$LOCAL_RANK exec "$0" "$@"' \
             env BRAID_TRANSPORT="$TRANSPORT" "$perf" -T 60 --result-rows "$@" 2>&1); then
    awk -F'\t' -v f="$field" -v s="$scale" '$1 == "RESULT" { print $f * s }' <<< "$out" >> "$results/$file"
  else
    echo "ib_guest: braid-perf $* failed:" >&2
    echo "$out" | tail -n 20 | sed 's/^/  /' >&2
  fi
}

# The same as two braidruns, one rank each (a job of two "hosts"); node 1 in the background, its
# output shown only when it fails. $5: pin (each node on its own vCPU) or free.
braid_two() {
  local file=$1 field=$2 scale=$3 port=$4 placement=$5
  shift 5
  local out node1 failed= node pin
  node1=$(mktemp)
  for node in 1 0; do
    pin=(); [ "$placement" = free ] || pin=(taskset -c "$node")
    local cmd=(timeout -k 10 300 env BRAID_IB_HCA=rxe$node BRAID_SOCKET_IFNAME=veth$node
               BRAID_SECRET=ib-guest-bench-two-hosts-secret "${pin[@]}"
               "$braidrun" --nnodes 2 --node-rank $node --nproc-per-node 1 --no-prefix
               --rdzv-endpoint 10.99.0.1:"$port" --
               env BRAID_TRANSPORT="$TRANSPORT" "$perf" -T 60 --result-rows "$@")
    if [ "$node" = 1 ]; then "${cmd[@]}" > "$node1" 2>&1 & continue; fi
    out=$("${cmd[@]}" 2>&1) || failed=yes
  done
  wait $! || failed=yes
  if [ -z "$failed" ]; then
    awk -F'\t' -v f="$field" -v s="$scale" '$1 == "RESULT" { print $f * s }' <<< "$out" >> "$results/$file"
  else
    echo "ib_guest: braid-perf $* as two braidruns failed:" >&2
    { echo "$out" | tail -n 10; tail -n 10 "$node1"; } | sed 's/^/  /' >&2
  fi
  rm -f "$node1"
}

# One perftest run; appends the results row's column $2 to file $1.
perftest() {
  local file=$1 column=$2 tool=$3 port=$4 size=$5
  shift 5
  local out
  if out=$("$pair" "$tool" "$port" -s "$size" "$@"); then
    awk -v c="$column" -v s="$size" '$1 == s && $2 ~ /^[0-9]+$/ { print $c; exit }' <<< "$out" >> "$results/$file"
  else
    echo "ib_guest: $tool failed" >&2
  fi
}

# One ib_pingpong_bench run; appends its median half round trip to file $1.
pingpong_run() {
  local file=$1 out
  shift
  if out=$(timeout -k 5 120 env -u BRAID_PERF_TRANSPORT "$pingpong" --iters 1000 "$@" 2>&1); then
    awk -F'\t' '$1 == "RESULT" { print $2 }' <<< "$out" >> "$results/$file"
    grep -v '^RESULT' <<< "$out" | sed 's/^/ib_guest:   /' >&2
  else
    echo "ib_guest: ib_pingpong_bench $* failed:" >&2
    echo "$out" | tail -n 5 | sed 's/^/  /' >&2
  fi
}

for round in $(seq "$ROUNDS"); do
  echo "ib_guest: round $round of $ROUNDS" >&2
  # ib_write_bw: column 4 is "BW average[Gb/sec]"; ib_write_lat: column 5 is t_typical (median).
  bandwidth=; [ "$ROWS" = latency ] || bandwidth=yes
  [ -z "$bandwidth" ] || perftest write_bw 4 ib_write_bw 18600 4194304 -n 20 --report_gbits -F
  # Broadcast: field 10 is algbw in GB/s; x8 gives Gbit/s, as perftest prints.
  [ -n "$braid_missing" ] || [ -z "$bandwidth" ] || braid broadcast 10 8 29610 --op broadcast -b 4M -e 4M -n 10 -w 2
  perftest write_lat 5 ib_write_lat 18601 8 -n 1000 -F
  # Sendrecv: field 7 is the median time in us of an 8 B exchange, both ranks sending at once.
  [ -n "$braid_missing" ] || braid sendrecv 7 1 29611 --op sendrecv -b 8 -e 8 -n 200 -w 20
  # The same with each rank on a "host" of its own: two braidruns, one rank and one vCPU each,
  # then with each rank free on both vCPUs (braidrun's binding of a node's only rank).
  if [ -z "$braid_missing" ]; then
    braid_two sendrecv_two 7 1 29615 pin --op sendrecv -b 8 -e 8 -n 200 -w 20
    braid_two sendrecv_two_free 7 1 29616 free --op sendrecv -b 8 -e 8 -n 200 -w 20
  fi
  # The same for an 8 B all_reduce on 2 ranks (one exchange each way).
  [ -n "$braid_missing" ] || braid all_reduce_8 7 1 29613 --op all_reduce -b 8 -e 8 -n 200 -w 20
  # The same sendrecv as a loop with no barrier between operations (--barrier 0), as perftest's
  # ping-pong runs (a braid-perf without the option leaves the row empty).
  if [ -z "$braid_missing" ] && "$perf" --help | grep -q -- --barrier; then
    braid sendrecv_loop 7 1 29614 --op sendrecv -b 8 -e 8 -n 200 -w 20 --barrier 0
  fi
  # The transport alone: field 2 is the median half round trip in us (how it waited and what
  # it posted per message on stderr's copy of its readable lines).
  if [ -z "$braid_missing" ] && [ -n "$bandwidth" ] && [ "$TRANSPORT" = ib ] && [ -x "$pingpong" ]; then
    pingpong_run pingpong
    if grep -q -- --capacity "$pingpong"; then pingpong_run pingpong_roomy --capacity 65600; fi
    if grep -q -- --exchange "$pingpong"; then pingpong_run exchange --exchange; fi
  fi
  # All-reduce: field 11 is busbw in GB/s.
  [ -n "$braid_missing" ] || [ -z "$bandwidth" ] || braid all_reduce 11 8 29612 --op all_reduce -b 4M -e 4M -n 10 -w 2
done

# COUNTS=1: per-iteration thread switches and system calls of the pinned two-braidrun sendrecv.
counts() {
  local n pid ev=context-switches,syscalls:sys_enter_futex,syscalls:sys_enter_write,syscalls:sys_enter_ioctl,syscalls:sys_enter_epoll_wait
  for n in 500 3000; do
    perf stat -a -x, -e "$ev" -o "$results/counts_$n" &
    pid=$!
    sleep 1  # perf is counting
    braid_two counts_time 7 1 $((29620 + n / 500)) pin --op sendrecv -b 8 -e 8 -n "$n" -w 20
    kill -INT "$pid"
    wait "$pid" || true
  done
  echo
  echo "Per iteration of the two-braidrun sendrecv (a rank and vCPU each), both ranks, guest-wide (perf stat -a, (3000 - 500 iterations) / 2500):"
  awk -F, 'FNR == 1 { f++ } $1 ~ /^[0-9.]+$/ { v[f, $3] = $1; names[$3] = 1 }
           END { for (e in names) printf "  %-36s %8.3f\n", e, (v[2, e] - v[1, e]) / 2500 }' \
    "$results/counts_500" "$results/counts_3000" | sort
}
if [ "$COUNTS" = 1 ] && [ -z "$braid_missing" ]; then
  if command -v perf > /dev/null; then counts; else echo "ib_guest: COUNTS=1 needs perf in the guest" >&2; fi
fi

# best (max, or min for latencies) and median of a file of numbers: "best median count"
stats() {
  local file=$results/$1 order=$2
  [ -s "$file" ] || { echo "- - 0"; return; }
  sort -g $order "$file" | awk '
    function fmt(x) { return sprintf(x >= 100 ? "%.0f" : x >= 1 ? "%.2f" : "%.3f", x) }
    { v[NR] = $1 }
    END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
          print fmt(v[1]), fmt(m), NR }'
}
row() {  # label file order unit
  local best median n
  read -r best median n <<< "$(stats "$2" "$3")"
  if [ "$n" = 0 ]; then printf '%-44s %s\n' "$1" "${5:-failed (see above)}"
  else printf '%-44s %10s %10s %8s %5s\n' "$1" "$best" "$median" "$4" "$n"; fi
}
ratio() {  # label braid-file perftest-file order
  local bb bm bn pb pm pn
  read -r bb bm bn <<< "$(stats "$2" "$4")"
  read -r pb pm pn <<< "$(stats "$3" "$4")"
  if [ "$bn" = 0 ] || [ "$pn" = 0 ]; then printf '%-44s %10s\n' "$1" "-"; return; fi
  awk -v l="$1" -v bb="$bb" -v bm="$bm" -v pb="$pb" -v pm="$pm" \
    'BEGIN { printf "%-44s %9.2fx %9.2fx\n", l, bb / pb, bm / pm }'
}

na=${braid_missing:+n/a ($braid_missing)}
skip=; [ "$ROWS" != latency ] || skip="not run (ROWS=latency)"
echo
echo "Soft-RoCE (rdma_rxe) in the emulated guest: rxe0 <-> rxe1, $ROUNDS interleaved rounds, braid over $TRANSPORT"
printf '%-44s %10s %10s %8s %5s\n' "" best median unit runs
row "ib_write_bw 4 MiB (BW average)" write_bw -r Gbit/s "$skip"
row "braid-perf broadcast 4 MiB, 2 ranks (algbw)" broadcast -r Gbit/s "${na:-$skip}"
ratio "  braid / ib_write_bw" broadcast write_bw -r
row "ib_write_lat 8 B (t_typical)" write_lat "" us
row "braid-perf sendrecv 8 B (median time)" sendrecv "" us "$na"
ratio "  braid / ib_write_lat" sendrecv write_lat ""
row "  two braidruns, a rank and vCPU each" sendrecv_two "" us "$na"
ratio "  braid / ib_write_lat" sendrecv_two write_lat ""
row "  two braidruns, ranks free on 2 vCPUs" sendrecv_two_free "" us "$na"
ratio "  braid / ib_write_lat" sendrecv_two_free write_lat ""
row "braid-perf all_reduce 8 B (median time)" all_reduce_8 "" us "$na"
ratio "  braid / ib_write_lat" all_reduce_8 write_lat ""
row "braid-perf sendrecv 8 B, loop (--barrier 0)" sendrecv_loop "" us "${na:-n/a (braid-perf without --barrier)}"
ratio "  braid / ib_write_lat" sendrecv_loop write_lat ""
row "ib transport ping-pong 8 B (half round trip)" pingpong "" us "${na:-${skip:-n/a (ib_pingpong_bench not built, or not over ib)}}"
ratio "  transport / ib_write_lat" pingpong write_lat ""
row "the same into 64 KiB receives" pingpong_roomy "" us "${na:-${skip:-n/a (ib_pingpong_bench without --capacity)}}"
ratio "  transport / ib_write_lat" pingpong_roomy write_lat ""
row "ib transport exchange 8 B (one iteration)" exchange "" us "${na:-${skip:-n/a (ib_pingpong_bench without --exchange)}}"
ratio "  transport / ib_write_lat" exchange write_lat ""
row "braid-perf all_reduce 4 MiB (busbw)" all_reduce -r Gbit/s "${na:-$skip}"
ratio "  braid busbw / ib_write_bw" all_reduce write_bw -r
