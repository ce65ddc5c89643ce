#!/bin/bash
# bench/mixed_hosts.sh - 2 network-namespace "hosts" x 2 ranks on one shaped link: braid-perf
# all_reduce with BRAID_TRANSPORT=auto (shm inside a host, tcp across) against iperf3 on the
# same link, in interleaved rounds of one run. Needs root (ip netns, tc) and iperf3.
#
# Topology: namespaces A and B joined by one veth pair, each end's egress shaped with tbf as
# ../shared/bench/run-netns.sh shapes its hosts (GSO capped at 16 KiB, 32 KiB bucket, 20 ms
# queue), so both directions of the link run at RATE. Ranks are placed round-robin (0, 2 on A;
# 1, 3 on B) and the ring is ordered by host (0 2 | 1 3): each direction carries one flow of
# 2(n-1)/n of the message per operation, so all_reduce busbw can reach the goodput of one
# direction while the other is busy too. That goodput G: two iperf3 flows at once, one each
# way, per-flow mean (see iperf_pair).
#
#   bench/mixed_hosts.sh [build dir] [rounds]            # 1gbit, 16 MiB, 5 rounds
#   RATE=200mbit BYTES=4M MODES="auto tcp" bench/mixed_hosts.sh build 3
# MODES: BRAID_TRANSPORT values to measure each round (default auto); SHAPE=0: no tbf.
# Prints each round's figures, then medians over rounds and each mode's ratio to G.
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${2:-5}
RATE=${RATE:-1gbit}
BYTES=${BYTES:-16M}
ITERS=${ITERS:-10}
MODES=${MODES:-auto}
SHAPE=${SHAPE:-1}
PERF=$(realpath "$BUILD/tools/braid_perf/braid-perf")
A=bmh$$a B=bmh$$b
OUT=$(mktemp -d)
cleanup() {
  ip netns del $A 2>/dev/null || true
  ip netns del $B 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add $A
ip netns add $B
ip -n $A link add v0 type veth peer name v1 netns $B
ip -n $A addr add 10.79.2.1/24 dev v0
ip -n $B addr add 10.79.2.2/24 dev v1
for ns in $A $B; do ip -n "$ns" link set lo up; done
ip -n $A link set v0 up
ip -n $B link set v1 up
if [ "$SHAPE" = 1 ]; then
  for end in "$A v0" "$B v1"; do
    read -r ns dev <<<"$end"
    ip -n "$ns" link set "$dev" gso_max_size 16384
    tc -n "$ns" qdisc add dev "$dev" root tbf rate "$RATE" burst 32768 latency 20ms
  done
fi
for _ in $(seq 50); do ip netns exec $A ping -c1 -W1 10.79.2.2 >/dev/null 2>&1 && break; sleep 0.2; done

# Two iperf3 flows at once, A -> B and B -> A, each its own client and server process (iperf3
# 3.12 runs --bidir on one thread, which the CPUs here limit before the link): the ring of
# flows the ordered ring's two crossing hops make. Prints the per-flow mean receiver goodput, GB/s.
iperf_pair() {
  local tmp spids=() cpids=()
  tmp=$(mktemp -d -p "$OUT")
  timeout 30 ip netns exec $A iperf3 -s -1 -B 10.79.2.1 -p 5210 >/dev/null 2>&1 & spids+=($!)
  timeout 30 ip netns exec $B iperf3 -s -1 -B 10.79.2.2 -p 5210 >/dev/null 2>&1 & spids+=($!)
  sleep 0.5
  timeout 30 ip netns exec $A iperf3 -c 10.79.2.2 -p 5210 -t 4 -f m >"$tmp/ab" 2>&1 & cpids+=($!)
  timeout 30 ip netns exec $B iperf3 -c 10.79.2.1 -p 5210 -t 4 -f m >"$tmp/ba" 2>&1 & cpids+=($!)
  wait "${cpids[@]}" || true
  wait "${spids[@]}" || true
  cat "$tmp"/* | awk '/receiver/{s+=$(NF-2); k++} END{if (k) printf "%.4f\n", s/k/8/1000}'
}

port=29800
# braid-perf all_reduce of BYTES on 4 ranks under BRAID_TRANSPORT=$1: in-place busbw, GB/s.
braid_run() {
  port=$((port + 1))
  local r ns pids=()
  for r in 0 1 2 3; do
    ns=$([ $((r % 2)) = 0 ] && echo $A || echo $B)
    BRAID_TRANSPORT=$1 MASTER_ADDR=10.79.2.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r / 2)) \
      LOCAL_WORLD_SIZE=2 timeout 300 ip netns exec "$ns" "$PERF" --op all_reduce -b "$BYTES" -e "$BYTES" \
      -n "$ITERS" -w 2 -c 1 --result-rows >"$OUT/$r" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || echo "braid ($1): a rank failed; $OUT/0:" >&2; done
  awk -F'\t' '$1=="RESULT" && $12=="ok"{v=$11} END{if (v != "") print v}' "$OUT/0"
}

: >"$OUT/rows"
for round in $(seq "$ROUNDS"); do
  g=$(iperf_pair)
  printf 'G\t%s\n' "$g" >>"$OUT/rows"
  line="round $round: iperf3 pair $g GB/s per flow"
  for mode in $MODES; do
    v=$(braid_run "$mode")
    [ -n "$v" ] || { cat "$OUT/0" >&2; v=nan; }
    printf '%s\t%s\n' "$mode" "$v" >>"$OUT/rows"
    line+="; braid $mode $v"
  done
  echo "$line"
done

python3 - "$OUT/rows" "$RATE" "$BYTES" "$ROUNDS" "$SHAPE" <<'PY'
import collections, math, statistics, sys
path, rate, size, rounds, shape = sys.argv[1:]
vals = collections.defaultdict(list)
for line in open(path):
    k, v = line.split()
    if v not in ("", "nan") and not math.isnan(float(v)):
        vals[k].append(float(v))
g = statistics.median(vals.pop("G")) if vals.get("G") else None
link = f"tbf {rate} on both ends" if shape == "1" else "unshaped"
print(f"\n2 hosts x 2 ranks, {link}, all_reduce {size} f32, medians of {rounds} rounds\n")
print("| what | busbw GB/s | ratio to G |")
print("|---|---|---|")
for k, v in vals.items():
    m = statistics.median(v)
    print(f"| braid BRAID_TRANSPORT={k} | {m:.4f} | {m / g:.2f}x |" if g else f"| braid {k} | {m:.4f} | - |")
if g:
    print(f"| iperf3, one flow each way at once, per flow (G) | {g:.4f} | 1.00x |")
if shape == "1":
    # TCP payload of full 1514-byte frames at the tbf rate: what no flow can exceed.
    v, mult = rate.removesuffix("bit"), 1
    for suffix, m in (("g", 1e9), ("m", 1e6), ("k", 1e3)):
        if v.endswith(suffix):
            v, mult = v[:-1], m
    ceiling = float(v) * mult / 8 / 1e9 * 1448 / 1514
    print(f"| tbf rate's TCP payload ceiling | {ceiling:.4f} | {ceiling / g:.2f}x |" if g else "")
PY
