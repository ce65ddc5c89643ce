#!/usr/bin/env bash
# bench/shm_sendrecv.sh - a 2-rank sendrecv over shm against the memory ceiling, in one run
# (issue 32: a 64 MiB sendrecv at >= 0.8x memcpy_pair's per-process rate).
#
#   bench/shm_sendrecv.sh [BUILD_DIR]                   (default: build)
#   ROUNDS=5 MIN=1M MAX=64M PRIO=rt bench/shm_sendrecv.sh
#
# A sendrecv of S bytes between two ranks moves S each way at once; the best a single copy can
# do is each rank copying S while the other does the same, which is what
# ../shared/bench/memcpy_pair.c measures (two processes, each memcpy S at once; per-process
# GB/s, the slower of the two per repetition, median). Per round and size S in MIN..MAX (x4):
# memcpy_pair S, then braid-perf `--op sendrecv` (each rank sends S to the other and receives S,
# GB/s each rank sent) under braidrun with BRAID_TRANSPORT=shm and
#   shm-auto  BRAID_SHM_CMA unset (auto, the default): single copy once the sender's buffer is
#             on huge pages, which it moves it onto (transport/shm/page_collapse.h);
#   shm-ring  BRAID_SHM_CMA=0: the pipelined two-copy ring;
#   shm-cma4k BRAID_SHM_CMA=1: single copy from the buffer's 4 KiB pages as they are.
# The order of the four rotates every round, so a noisy neighbour hits each alike. braid-perf
# runs -n ITERS (20) after -w WARMUP (5) per size, each timed alone after a barrier, max over
# ranks, median; the warm-up takes the one-time move onto huge pages.
# PRIO=rt runs everything under `chrt -f 10` (root; SCHED_FIFO), PRIO=nice under `nice -n -20`:
# other jobs on a shared machine then (nearly) cannot take a rank's CPU mid-measurement; memory
# bandwidth is still shared. Without it, on a loaded machine the figures measure the scheduler as
# much as the copies. Under rt a spinning thread keeps its CPU from other threads of the same
# priority: fine for sendrecv (the calling thread alone runs it), not for every operation.
# Prints the RESULT rows, then per size the median of each over the rounds and its ratio to
# memcpy_pair's median.
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${ROUNDS:-5}
MIN=${MIN:-1M}
MAX=${MAX:-64M}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
PRIO=${PRIO:-}
ANCHORS=${ANCHORS:-$(cd "$(dirname "$0")/../.." && pwd)/shared/bench}
[ -d "$ANCHORS" ] || ANCHORS=/work/shared/bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -O2 -o "$out/memcpy_pair" "$ANCHORS/memcpy_pair.c"
rt=()
case $PRIO in
  rt) rt=(chrt -f 10) ;;
  nice) rt=(nice -n -20) ;;
  "") ;;
  *) echo "PRIO is rt, nice or empty" >&2 && exit 2 ;;
esac
min_bytes=$(numfmt --from=iec "$MIN")
max_bytes=$(numfmt --from=iec "$MAX")

memcpy_pair() {  # every size from MIN to MAX (x4) as RESULT rows: GB/s in column 11 as braid's
  local s
  for ((s = min_bytes; s <= max_bytes; s *= 4)); do
    "${rt[@]}" "$out/memcpy_pair" "$s" 20 |
      awk -F'\t' '{ printf "RESULT\tmemcpy_pair\tsendrecv\t2\t%s\t%s\t%s\t-\t-\t-\t%s\n", $5, $6, $7, $8 }'
  done
}

perf() {  # variant [env...]
  local v=$1
  shift
  env -u BRAID_SHM_CMA "$@" BRAID_TRANSPORT=shm "${rt[@]}" timeout 300 "$BUILD/tools/braidrun/braidrun" \
    --standalone --nproc-per-node 2 "$BUILD/tools/braid_perf/braid-perf" --op sendrecv -b "$MIN" -e "$MAX" -f 4 \
    -n "$ITERS" -w "$WARMUP" --result-rows 2>&1 | sed -n 's/^\[rank 0\] RESULT\tbraid\t[^\t]*\t/RESULT\t'"$v"'\tsendrecv\t/p'
}

variants=(memcpy_pair shm-auto shm-ring shm-cma4k)
for round in $(seq "$ROUNDS"); do
  echo "# round $round, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  for i in 0 1 2 3; do
    case ${variants[$(((i + round) % 4))]} in
      memcpy_pair) memcpy_pair ;;
      shm-auto) perf shm-auto ;;
      shm-ring) perf shm-ring BRAID_SHM_CMA=0 ;;
      shm-cma4k) perf shm-cma4k BRAID_SHM_CMA=1 ;;
    esac
  done
done | tee "$out/rows"

echo
echo "# medians over $ROUNDS round(s), GB/s each rank moved each way; x: ratio to memcpy_pair (same size, same run)"
python3 - "$out/rows" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] != "RESULT":
        continue
    rows.setdefault((int(f[4]), f[1]), []).append(float(f[10]))
names = ["memcpy_pair", "shm-auto", "shm-ring", "shm-cma4k"]
print(f"{'bytes':>10} " + " ".join(f"{n:>18}" for n in names))
for size in sorted({s for s, _ in rows}):
    ceiling = statistics.median(rows.get((size, "memcpy_pair"), [float("nan")]))
    cells = []
    for n in names:
        v = rows.get((size, n))
        cells.append(f"{'-':>18}" if not v else f"{statistics.median(v):8.2f} ({statistics.median(v) / ceiling:4.2f}x) ")
    print(f"{size:>10} " + " ".join(cells))
EOF
