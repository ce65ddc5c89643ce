#!/bin/bash
# bench/mixed_hosts.sh - 2 network-namespace "hosts" x 2 ranks, placed round-robin (0, 2 on A;
# 1, 3 on B), all_reduce with braid-perf, BRAID_TRANSPORT=auto (shm inside a host, tcp across)
# against BRAID_TRANSPORT=tcp (tcp everywhere), in alternating rounds of one run. Needs root.
#   bench/mixed_hosts.sh [build dir] [rounds]
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${2:-2}
PERF=$(realpath "$BUILD/tools/braid_perf/braid-perf")
A=bmh$$a B=bmh$$b
cleanup() { ip netns del $A 2>/dev/null || true; ip netns del $B 2>/dev/null || true; }
trap cleanup EXIT
ip netns add $A
ip netns add $B
ip -n $A link add v0 type veth peer name v1 netns $B
ip -n $A addr add 10.79.2.1/24 dev v0
ip -n $B addr add 10.79.2.2/24 dev v1
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set v0 up
ip -n $B link set v1 up
port=29800
run() {  # $1: BRAID_TRANSPORT
  port=$((port + 1))
  local out pids=()
  out=$(mktemp -d)
  for r in 0 1 2 3; do
    ns=$([ $((r % 2)) = 0 ] && echo $A || echo $B)
    BRAID_TRANSPORT=$1 MASTER_ADDR=10.79.2.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r / 2)) \
      LOCAL_WORLD_SIZE=2 timeout 300 ip netns exec $ns "$PERF" --op all_reduce -b 1M -e 16M -f 4 -n 10 -w 3 -c 0 \
      >"$out/$r" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  echo "== BRAID_TRANSPORT=$1"
  grep -E '^ +[0-9]+ ' "$out/0"
  rm -r "$out"
}
for _ in $(seq "$ROUNDS"); do
  run auto
  run tcp
done
