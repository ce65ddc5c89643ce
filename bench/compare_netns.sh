#!/usr/bin/env bash
# braid on an emulated cluster: K network namespaces ("hosts") on a bridge, every host's egress
# shaped with tbf (../shared/bench/run-netns.sh builds the topology), one rank per host.
# SHAPE=both also shapes the bridge's egress port toward each host, as a switch's port would be
# (the same tbf: rate, 32 KiB bucket, 20 ms queue): then a host's traffic is shaped twice on
# its way, once leaving the host and once leaving the switch. SHAPE=each measures every round
# both ways (switch ports shaped, then not), for a same-run comparison of the two. In one run,
# interleaved in rounds, it measures:
#   - the link's goodput G for the same traffic pattern: K concurrent iperf3 flows around the
#     ring (host i -> host i+1), per-flow mean; for K=2 also iperf3 --bidir (per direction);
#   - braid-perf all_reduce (f32 sum) and, for K=2, sendrecv (both directions at once);
#   - Gloo (ring_chunked) and Open MPI (TCP) all_reduce from ../shared/bench.
# and prints median busbw over rounds and braid's ratios to G and to the anchors.
#
#   bench/compare_netns.sh                 # K=4, 1gbit, 64 MiB, 3 rounds
#   K=2 RATE=200mbit BYTES=16M ROUNDS=2 bench/compare_netns.sh
#   SHAPE=both ROUNDS=5 bench/compare_netns.sh    # both ends of every link shaped
# BRAID_ENV: extra variables for braid's ranks ("BRAID_RING_DEPTH=4 BRAID_CHUNK_BYTES=1M").
# VARIANTS: ';'-separated such settings, each measured every round next to the default
# ("BRAID_RING_DEPTH=4;BRAID_CHUNK_BYTES=1M"): a same-run comparison of braid's knobs.
# HOST_CC: the hosts' default TCP congestion control (cubic, reno, bbr; unset: the machine's).
# LOAD: that many busy-looping processes (at nice LOAD_NICE, default 10, as the compilers other
# sessions run here are) share the CPUs with every measurement of the run, iperf3, braid and Gloo
# alike: a repeatable stand-in for a machine whose cores are not the ranks' alone.
# ANCHORS: ../shared/bench (default: beside the checkout, or beside the main one in a worktree).
# Needs root (ip netns, tc). Namespaces are named brd0..brd{K-1} and brdsw, deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ANCHORS=${ANCHORS:-$ROOT/../shared/bench}
if [ ! -d "$ANCHORS" ] && common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null); then
  ANCHORS=$(dirname "$(dirname "$common")")/shared/bench  # a worktree: beside the main checkout
fi
K=${K:-4}
RATE=${RATE:-1gbit}
BYTES=${BYTES:-64M}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-5}
SHAPE=${SHAPE:-host}
HOST_CC=${HOST_CC:-}
LOAD=${LOAD:-0}
LOAD_NICE=${LOAD_NICE:-10}
BRAID_ENV=${BRAID_ENV:-}
IFS=';' read -r -a variants <<<"${VARIANTS:-}"
variants=("" "${variants[@]}")
case "$SHAPE" in host) modes=(host) ;; both) modes=(both) ;; each) modes=(both host) ;;
  *) echo "SHAPE=$SHAPE: host, both or each" >&2; exit 2 ;; esac
export NINJA_TARGETS=${NINJA_TARGETS:-tools/braid_perf/braid-perf tools/braidrun/braidrun}
OUT=${OUT:-$ROOT/build-bench/compare-netns}
export ANC_NS_PREFIX=brd ANCHOR_BUILD=$ROOT/build-bench/anchors ANCHOR_RESULTS=$OUT RUN_TIMEOUT=${RUN_TIMEOUT:-300}
# shellcheck source=bench/common.sh
. bench/common.sh
prepare_braid_and_anchors

netns=$ANCHORS/run-netns.sh
bash "$netns" teardown "$K" >/dev/null 2>&1 || true
hogs=()
stop_load() {
  local p
  for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done
  hogs=()
}
trap 'stop_load; bash "$netns" teardown "$K" >/dev/null 2>&1 || true' EXIT
bash "$netns" setup "$K" "$RATE"
for ((i = 0; i < K; i++)); do ip -n brdsw link set "p$i" gso_max_size 16384; done
if [ -n "$HOST_CC" ]; then  # each host's default congestion control (a per-namespace sysctl)
  for ((i = 0; i < K; i++)); do ip netns exec "brd$i" sysctl -qw net.ipv4.tcp_congestion_control="$HOST_CC"; done
fi
switch_ports() {  # shaped | plain: the switch's port toward each host, shaped as the host's egress is
  local i
  for ((i = 0; i < K; i++)); do
    if [ "$1" = shaped ]; then
      tc -n brdsw qdisc replace dev "p$i" root tbf rate "$RATE" burst 32768 latency 20ms
    else
      tc -n brdsw qdisc del dev "p$i" root 2>/dev/null || true
    fi
  done
}
host() { echo "10.213.0.$(($1 + 1))"; }
bytes=$(numfmt --from=iec "$BYTES")

# K flows at once around the ring; prints the per-flow mean in GB/s.
iperf_ring() {
  local i tmp; tmp=$(mktemp -d)
  for ((i = 0; i < K; i++)); do
    timeout 30 ip netns exec "brd$(((i + 1) % K))" iperf3 -s -1 -B "$(host $(((i + 1) % K)))" -p 5201 >/dev/null 2>&1 &
  done
  sleep 0.5
  for ((i = 0; i < K; i++)); do
    timeout 30 ip netns exec "brd$i" iperf3 -c "$(host $(((i + 1) % K)))" -p 5201 -t 4 -f m > "$tmp/$i" 2>&1 &
  done
  wait
  cat "$tmp"/* | awk '/receiver/{s+=$(NF-2); k++} END{if (k) printf "%.4f\n", s/k/8/1000}'
  rm -rf "$tmp"
}

iperf_bidir() {
  timeout 30 ip netns exec brd0 iperf3 -s -1 -B "$(host 0)" -p 5202 >/dev/null 2>&1 &
  sleep 0.5
  timeout 30 ip netns exec brd1 iperf3 -c "$(host 0)" -p 5202 -t 4 -f m --bidir 2>&1 |
    awk '/receiver/{s+=$(NF-2); k++} END{if (k) printf "%.4f\n", s/k/8/1000}'
  wait
}

braid_perf() {  # op [variables] -> rows into OUTFILE
  local op=$1 extra=${2:-} i pids=() tmp; tmp=$(mktemp -d)
  for ((i = K - 1; i >= 0; i--)); do
    # shellcheck disable=SC2086
    timeout "$RUN_TIMEOUT" ip netns exec "brd$i" env $BRAID_ENV $extra "$BUILD_DIR"/tools/braidrun/braidrun --nnodes "$K" --node-rank "$i" \
      --nproc-per-node 1 --rdzv-endpoint "$(host 0):29700" --no-prefix \
      "$BUILD_DIR"/tools/braid_perf/braid-perf --op "$op" -b "$bytes" -e "$bytes" -n "$ITERS" -w 1 -c 1 --result-rows \
      > "$tmp/$i" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || log "braid $op: a node failed"; done
  grep -P '^RESULT\t' "$tmp/0" | tag_results "$op${extra:+[$extra]}$at" >/dev/null || log "braid $op: no result"
  rm -rf "$tmp"
}

rsh_prefix() { echo "ip netns exec brd$1"; }
for ((i = 0; i < LOAD; i++)); do
  nice -n "$LOAD_NICE" bash -c 'while :; do :; done' &
  hogs+=($!)
done
for round in $(seq 1 "$ROUNDS"); do
  for mode in "${modes[@]}"; do
    # each row is tagged with the mode ("@both") when the run compares modes
    at=""; [ ${#modes[@]} -gt 1 ] && at="@$mode"
    if [ "$mode" = both ]; then switch_ports shaped; else switch_ports plain; fi
    log "round $round/$ROUNDS${at:+ ($mode)}: iperf3 ring of $K flows"
    printf 'ring%s\tGOODPUT\t%s\n' "$at" "$(iperf_ring)" >> "$OUTFILE"
    if [ "$K" = 2 ]; then printf 'bidir%s\tGOODPUT\t%s\n' "$at" "$(iperf_bidir)" >> "$OUTFILE"; fi
    log "round $round: braid all_reduce"
    for v in "${variants[@]}"; do braid_perf all_reduce "$v"; done
    if [ "$K" = 2 ]; then log "round $round: braid sendrecv"; braid_perf sendrecv; fi
    log "round $round: gloo ring_chunked"
    GLOO_IFACE=aeth0 run_gloo "gloo$at" "$K" rsh_prefix --algos ring_chunked --min-bytes "$bytes" \
      --max-bytes "$bytes" --min-iters "$ITERS" --max-iters "$ITERS" >/dev/null || true
  done
done

tbf_stats() {  # drops and overlimits of every shaped queue, for the summary
  local i
  for ((i = 0; i < K; i++)); do
    printf 'brd%s aeth0: %s\n' "$i" "$(tc -s -n "brd$i" qdisc show dev aeth0 | grep -o 'dropped [0-9]*, overlimits [0-9]*')"
    if [ "$SHAPE" != host ]; then
      printf 'brdsw p%s: %s\n' "$i" "$(tc -s -n brdsw qdisc show dev "p$i" | grep -o 'dropped [0-9]*, overlimits [0-9]*')"
    fi
  done
}
stop_load
tbf_stats > "$OUT/tbf-stats.txt"

python3 - "$OUTFILE" "$K" "$RATE" "$SHAPE" "$ROUNDS" "$BRAID_ENV" "$HOST_CC" "$LOAD" "$LOAD_NICE" <<'PY' | tee "$OUT/summary.md"
import collections, statistics, sys
path, k, rate, shape, rounds, benv, hcc, load, load_nice = sys.argv[1:10]
k = int(k)
good = collections.defaultdict(list); bus = collections.defaultdict(list)
for line in open(path):
    r = line.rstrip("\n").split("\t")
    if len(r) >= 3 and r[1] == "GOODPUT" and r[2]:
        good[r[0]].append(float(r[2]))
    elif len(r) >= 13 and r[1] == "RESULT":
        bus[(r[0], r[3])].append(float(r[11]))
where = {"both": "each host's egress and the switch port toward it",
         "each": "each host's egress, and the switch ports (@both) or not (@host),"}.get(shape, "each host's egress")
cc = f", hosts' congestion control {hcc}" if hcc else ""
busy = f", {load} busy loops at nice {load_nice} beside them" if load != "0" else ""
print(f"{k} hosts, {where} shaped to {rate}{cc}{busy}, medians of {rounds} rounds{', braid with ' + benv if benv else ''}\n")
print("| what | busbw GB/s | ratio to goodput G |")
print("|---|---|---|")
for name, vals in sorted(bus.items()):
    m = statistics.median(vals)
    at = name[0][name[0].index("@"):] if "@" in name[0] else ""
    ref = good.get(("bidir" if name[0].startswith("sendrecv") else "ring") + at) or good.get("ring" + at)
    ref = statistics.median(ref) if ref else None
    print(f"| {name[0]} {name[1]} | {m:.4f} | {m / ref:.2f}x |" if ref else f"| {name[0]} {name[1]} | {m:.4f} | - |")
for kind, vals in sorted(good.items()):
    print(f"| iperf3 {kind} (per flow) | {statistics.median(vals):.4f} | 1.00x |")
PY
