#!/usr/bin/env bash
# braid against Gloo and Open MPI (Debian's) on loopback, interleaved in rounds so that the
# machine's drift (up to 2x between minutes here) hits every library alike; prints the median
# over rounds of each library's per-size median, and braid's ratios to each.
#
#   bench/compare_loopback.sh                 # N=2, all_reduce f32 sum, 4 KiB .. 64 MiB, 3 rounds
#   ROUNDS=5 N=4 bench/compare_loopback.sh
#
# Needs the anchors' packages: BRAID_SETUP_ANCHORS=1 scripts/setup.sh (the script runs it).
# Anchor sources come from ../shared/bench (same method: barrier, time one in-place all_reduce,
# max over ranks, median over iterations).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ANCHORS=${ANCHORS:-$ROOT/../shared/bench}
ROUNDS=${ROUNDS:-3}
N=${N:-2}
MIN_BYTES=${MIN_BYTES:-4096}
MAX_BYTES=${MAX_BYTES:-67108864}
GLOO_ALGOS=${GLOO_ALGOS:-ring_chunked,halving_doubling}
OUT=${OUT:-$ROOT/build-bench/compare-loopback}
export ANCHOR_BUILD=$ROOT/build-bench/anchors ANCHOR_RESULTS=$OUT RUN_TIMEOUT=${RUN_TIMEOUT:-170}

# shellcheck source=bench/common.sh
. bench/common.sh
prepare_braid_and_anchors
SWEEP=(--min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES")
noprefix() { :; }

# braid's loopback sockets use BRAID_LOOPBACK_CC (default reno); Gloo, Open MPI and iperf3 have
# no such setting and use the kernel's default (bbr on this VM). So braid also runs with
# BRAID_LOOPBACK_CC=system ("braid-syscc"), and the ceiling is iperf3 with braid's choice (-C).
LOOPBACK_CC=${BRAID_LOOPBACK_CC:-reno}
CEILING_CC=()
[ "$LOOPBACK_CC" != system ] && CEILING_CC=(-C "$LOOPBACK_CC")

# iperf3: two flows at once between the same endpoints, one each way; per-flow mean (GB/s).
ceiling() {
  local p1=$((5400 + RANDOM % 300)) p2
  p2=$((p1 + 300))
  timeout 20 iperf3 -s -1 -B 127.0.0.1 -p $p1 >/dev/null 2>&1 &
  timeout 20 iperf3 -s -1 -B 127.0.0.1 -p $p2 >/dev/null 2>&1 &
  sleep 0.5
  local tmp; tmp=$(mktemp -d)
  timeout 20 iperf3 -c 127.0.0.1 -p $p1 -t 3 -f m "${CEILING_CC[@]}" > "$tmp/a" 2>&1 &
  timeout 20 iperf3 -c 127.0.0.1 -p $p2 -t 3 -f m -R "${CEILING_CC[@]}" > "$tmp/b" 2>&1
  wait
  cat "$tmp/a" "$tmp/b" | awk '/receiver/{s+=$(NF-2); k++} END{if (k) print s/k}'
  rm -rf "$tmp"
}

# run_braid ROUND LABEL [VAR=VALUE...]: one braid-perf sweep, its rows named LABEL.
run_braid() {
  local round=$1 label=$2
  shift 2
  env "$@" timeout "$RUN_TIMEOUT" "$BUILD_DIR"/tools/braidrun/braidrun --standalone --no-prefix --nproc-per-node "$N" \
    "$BUILD_DIR"/tools/braid_perf/braid-perf --op all_reduce -b "$MIN_BYTES" -e "$MAX_BYTES" -f 4 -n 40 -w 5 -c 1 \
    --result-rows | sed "s/^RESULT\tbraid\t/RESULT\t$label\t/" | tag_results "round$round" >/dev/null ||
    log "$label failed"
}

for round in $(seq 1 "$ROUNDS"); do
  log "round $round/$ROUNDS: braid"
  run_braid "$round" braid
  if [ "$LOOPBACK_CC" != system ]; then
    log "round $round: braid with the kernel's congestion control"
    run_braid "$round" braid-syscc BRAID_LOOPBACK_CC=system
  fi
  IFS=, read -r -a algos <<< "$GLOO_ALGOS"
  for algo in "${algos[@]}"; do
    log "round $round: gloo $algo"
    GLOO_IFACE=lo run_gloo "round$round" "$N" noprefix --algos "$algo" "${SWEEP[@]}" >/dev/null
  done
  log "round $round: Open MPI tcp (default and ring)"
  timeout "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$N" --mca btl tcp,self \
    --mca btl_tcp_if_include lo "$ANCHOR_BUILD/mpi_bench" --label tcp-lo "${SWEEP[@]}" |
    tag_results "round$round" >/dev/null || log "mpi tcp failed"
  timeout "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe -np "$N" --mca btl tcp,self \
    --mca btl_tcp_if_include lo --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4 \
    "$ANCHOR_BUILD/mpi_bench" --label tcp-lo-ring "${SWEEP[@]}" | tag_results "round$round" >/dev/null ||
    log "mpi tcp ring failed"
  log "round $round: iperf3 ceiling"
  printf 'round%s\tCEILING\t%s\n' "$round" "$(ceiling)" >> "$OUTFILE"
done

python3 "$ROOT/bench/compare_table.py" "$OUTFILE" "$N" | tee "$OUT/summary.md"
