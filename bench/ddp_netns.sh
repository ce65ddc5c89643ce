#!/usr/bin/env bash
# DDP per-step time, and the share of the gradient all_reduce hidden behind backward, on emulated
# hosts: bench/ddp/ddp_step_bench with one rank per network namespace (ddpb0, ddpb1, ... on a
# bridge in ddpbsw; each host's egress shaped with tbf to $RATE by ../shared/bench/run-netns.sh),
# once for each rank count in $RANKS. The global batch stays $BATCH, split over the ranks.
#
# One compute thread per rank, and each rank pinned to one CPU (rank i to CPU i mod nproc), so
# at 2 ranks on a 2-CPU machine each rank has a core of its own and its communication threads
# take their CPU from that core. Rank counts above nproc share CPUs: those runs measure
# oversubscription, not DDP, and are labelled so.
#
#   bench/ddp_netns.sh        # 1gbit, RANKS="1 2 4", MLP 784-512x8-10, global batch 512, 1 MiB buckets
#   BATCH=64 RANKS=2 bench/ddp_netns.sh                          # communication dominates
#   LAYERS=1 HIDDEN=128 BATCH=64 BUCKET_KIB=25600 bench/ddp_netns.sh   # the example's own model
# ddp_step_bench's header explains the configurations and the hidden share. The 1-minute load
# average is printed before each run: other work on the machine skews the figures.
# Needs root (ip netns, tc). The namespaces are deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RATE=${RATE:-1gbit}
RANKS=${RANKS:-1 2 4}
LAYERS=${LAYERS:-8}
HIDDEN=${HIDDEN:-512}
BATCH=${BATCH:-512}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-4}
# 1 MiB buckets: with the Reducer's default (1 MiB, then 25 MiB) this 8.6 MiB gradient makes two
# buckets, and the second, 7.5 MiB, could start only when backward ends.
FIRST_BUCKET_KIB=${FIRST_BUCKET_KIB:-1024}
BUCKET_KIB=${BUCKET_KIB:-1024}
PORT=${PORT:-29761}
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
BUILD_DIR=${BUILD_DIR:-build}
export ANC_NS_PREFIX=ddpb ANCHOR_BUILD=$ROOT/$BUILD_DIR/anchors ANCHOR_RESULTS=$ROOT/$BUILD_DIR/netns
[ -f "$BUILD_DIR/build.ninja" ] || meson setup "$BUILD_DIR" >/dev/null
ninja -C "$BUILD_DIR" -j 2 tools/braidrun/braidrun bench/ddp/ddp_step_bench >/dev/null

K=1
for n in $RANKS; do ((n > K)) && K=$n; done
CPUS=$(nproc)
netns=$ROOT/../shared/bench/run-netns.sh
bash "$netns" teardown "$K" >/dev/null 2>&1 || true
trap 'bash "$netns" teardown "$K" >/dev/null 2>&1 || true' EXIT
bash "$netns" setup "$K" "$RATE"
tmp=$(mktemp -d)

run_ranks() {  # ranks port -> every rank's output in $tmp/<rank>
  local n=$1 port=$2 i pids=() rc=0
  for ((i = n - 1; i >= 0; i--)); do
    timeout "$RUN_TIMEOUT" ip netns exec "${ANC_NS_PREFIX}$i" taskset -c $((i % CPUS)) \
      "$BUILD_DIR"/tools/braidrun/braidrun --nnodes "$n" --node-rank "$i" --nproc-per-node 1 \
      --rdzv-endpoint "10.213.0.1:$port" --no-prefix \
      "$BUILD_DIR"/bench/ddp/ddp_step_bench --layers "$LAYERS" --hidden "$HIDDEN" --batch "$BATCH" \
      --rounds "$ROUNDS" --steps "$STEPS" --first-bucket-kib "$FIRST_BUCKET_KIB" --bucket-kib "$BUCKET_KIB" \
      > "$tmp/$i" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ "$rc" != 0 ]; then echo "a rank failed:"; tail -n 20 "$tmp"/*; return 1; fi
}

port=$PORT
for n in $RANKS; do
  if ((n == 1)); then
    where="1 host (${ANC_NS_PREFIX}0), no communication"
  else
    where="$n hosts (${ANC_NS_PREFIX}0..${ANC_NS_PREFIX}$((n - 1))), egress tbf $RATE"
  fi
  note="one CPU per rank"
  ((n > CPUS)) && note="OVERSUBSCRIBED: $n ranks on $CPUS CPUs, ranks share CPUs; this measures CPU sharing, not DDP"
  echo "== $n rank(s): $where; $note; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  run_ranks "$n" "$port"
  grep -v '^braidrun:' "$tmp/0"
  echo
  port=$((port + 1))
done
rm -rf "$tmp"
