#!/usr/bin/env bash
# What the Python/torch layer costs: all_reduce (f32 sum, in place, 2 ranks on this host, shm)
# through torch.distributed with backend "braid" against braid-perf, the C++ public API, in the
# same run, interleaved in rounds. Both place ranks alike: PLACE=free (default) leaves every rank
# free to run on every CPU, as torchrun and mp.spawn do (braidrun --cpu-bind none); PLACE=pinned
# gives each rank its own CPU (braidrun's default; torch_vs_gloo.py --pin). Both wait the same
# way: BRAID_SPIN_US as braid.torch chooses for that placement (0 where ranks share CPUs), unless
# set. Each cell: median over rounds of the run's median time.
#
#   bench/torch/layer_cost.sh                      # ~2 min
#   PLACE=pinned ROUNDS=5 SIZES=4K,64M bench/torch/layer_cost.sh
#
# Output: the table on stdout and in $OUT/table.md, each run's JSON in $OUT/.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PLACE=${PLACE:-free}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:-4K,64K,1M,16M,64M}
OUT=${OUT:-/tmp/braid-torch-layer-cost}
PY=/usr/bin/python3
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

case $PLACE in
  free) bind=none; pin=(); export BRAID_SPIN_US=${BRAID_SPIN_US:-0} ;;
  pinned) bind=auto; pin=(--pin) ;;
  *) log "PLACE must be free or pinned"; exit 2 ;;
esac
mkdir -p "$OUT"
rm -f "$OUT"/*.json
log "load before: $(cat /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  for size in ${SIZES//,/ }; do
    timeout 300 "$BUILD/tools/braidrun/braidrun" --standalone --nproc-per-node 2 --cpu-bind "$bind" \
      "$BUILD/tools/braid_perf/braid-perf" -b "$size" -e "$size" -n 20 -w 3 -c 0 \
      --json "$OUT/perf.$size.r$round.json" > "$OUT/last-run.log" 2>&1 ||
      { log "braid-perf failed"; cat "$OUT/last-run.log" >&2; exit 1; }
  done
  timeout 600 $PY bench/torch/torch_vs_gloo.py --build "$BUILD" --backends braid --no-ddp --rounds 1 \
    --max-iters 20 --sizes "$SIZES" "${pin[@]}" --json "$OUT/torch.r$round.json" > "$OUT/last-run.log" 2>&1 ||
    { log "torch_vs_gloo.py failed"; cat "$OUT/last-run.log" >&2; exit 1; }
  log "round $round of $ROUNDS done"
done
log "load after: $(cat /proc/loadavg)"

$PY - "$OUT" "$PLACE" "${BRAID_SPIN_US:-default}" > "$OUT/table.md" <<'PY'
import glob, json, os, statistics, sys
out, place, spin = sys.argv[1:4]
perf, torch = {}, {}
for path in glob.glob(os.path.join(out, "perf.*.json")):
    for row in json.load(open(path))["rows"]:
        perf.setdefault(row["bytes"], []).append(row["in_place"]["time_us"])
for path in glob.glob(os.path.join(out, "torch.*.json")):
    for row in json.load(open(path))["rows"]:
        torch.setdefault(row["bytes"], []).append(row["braid"] * 1e6)
print(f"2 ranks, ranks {place}, BRAID_SPIN_US={spin}; median over rounds ({len(glob.glob(os.path.join(out, 'torch.*.json')))})"
      " of each run's median; in place")
print()
print("| size | braid-perf us | torch.distributed braid us | torch / braid-perf | busbw braid-perf GB/s | busbw torch GB/s |")
print("|---:|---:|---:|---:|---:|---:|")
for n in sorted(set(perf) & set(torch)):
    p, t = statistics.median(perf[n]), statistics.median(torch[n])
    size = f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
    print(f"| {size} | {p:.1f} | {t:.1f} | {t / p:.2f} | {n / p / 1e3:.3f} | {n / t / 1e3:.3f} |")
PY
cat "$OUT/table.md"
