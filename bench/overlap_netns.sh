#!/usr/bin/env bash
# Overlap efficiency on 2 emulated hosts: namespaces ovl0 and ovl1 on a bridge (namespace ovlsw),
# each host's egress shaped with tbf to $RATE (../shared/bench/run-netns.sh builds it), one rank
# per host running bench/runtime/overlap_bench under braidrun. For each (C, S) pair rank 0 prints
# compute alone, all_reduce alone, compute with all_reduce_async overlapped, the CPU time the
# communication used, and whether overlapped <= 1.1 * max(compute, all_reduce) + comm CPU.
#
#   bench/overlap_netns.sh                                  # 1gbit, C = 20,50 ms, S = 1,4 MiB
#   RATE=200mbit COMPUTE_MS=50,100 BYTES=1M STEPS=5 bench/overlap_netns.sh
# Needs root (ip netns, tc). The namespaces are deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RATE=${RATE:-1gbit}
COMPUTE_MS=${COMPUTE_MS:-20,50}
BYTES=${BYTES:-1M,4M}
STEPS=${STEPS:-20}
PORT=${PORT:-29741}
RUN_TIMEOUT=${RUN_TIMEOUT:-150}
BUILD_DIR=${BUILD_DIR:-build-ovl}
K=2
export ANC_NS_PREFIX=ovl ANCHOR_BUILD=$ROOT/$BUILD_DIR/anchors ANCHOR_RESULTS=$ROOT/$BUILD_DIR/netns
[ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" >/dev/null
ninja -C "$BUILD_DIR" -j 2 tools/braidrun/braidrun bench/runtime/overlap_bench >/dev/null

netns=$ROOT/../shared/bench/run-netns.sh
bash "$netns" teardown "$K" >/dev/null 2>&1 || true
trap 'bash "$netns" teardown "$K" >/dev/null 2>&1 || true' EXIT
bash "$netns" setup "$K" "$RATE"
echo "2 hosts (${ANC_NS_PREFIX}0, ${ANC_NS_PREFIX}1), egress tbf $RATE, $(nproc) CPUs shared by both"

tmp=$(mktemp -d)
pids=()
for ((i = K - 1; i >= 0; i--)); do
  # Each host gets its own CPU, as two machines would (and the kernel's network work for a
  # rank's traffic then lands on that rank's CPU, where overlap_bench can see it).
  timeout "$RUN_TIMEOUT" ip netns exec "${ANC_NS_PREFIX}$i" taskset -c "$((i % $(nproc)))" \
    "$BUILD_DIR"/tools/braidrun/braidrun --nnodes "$K" \
    --node-rank "$i" --nproc-per-node 1 --rdzv-endpoint "10.213.0.1:$PORT" --no-prefix \
    "$BUILD_DIR"/bench/runtime/overlap_bench --compute-ms "$COMPUTE_MS" --bytes "$BYTES" --steps "$STEPS" --machine-ranks "$K" \
    > "$tmp/$i" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat "$tmp/0"
if [ "$rc" != 0 ]; then echo "--- rank 1 (a rank failed) ---"; cat "$tmp/1"; fi
rm -rf "$tmp"
exit "$rc"
