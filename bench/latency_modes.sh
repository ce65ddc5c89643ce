#!/usr/bin/env bash
# Latency over sizes, every way a small operation can be issued: all_reduce and send/recv
# (braid-perf's sendrecv), BRAID_CALLER_PROGRESS=1 (the default) and 0, blocking calls and
# *_async + Work::wait() (braid-perf --calls), for one or more builds side by side. Runs are
# interleaved over rounds and each cell is the median of its rounds' times (each of those
# the median of -n iterations, out of place, 2 ranks on loopback under braidrun).
#
#   bench/latency_modes.sh                                   # this tree's build, ~1.5 min
#   BUILDS="before=../latency-base/build after=build" ROUNDS=5 bench/latency_modes.sh
#
# A build given as NAME=DIR must hold tools/braidrun/braidrun and a braid-perf that knows
# --calls (an older tree: copy tools/braid_perf from this one, it uses the public API only).
# Output: the table on stdout and in $OUT/table.md, each run's JSON in $OUT/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILDS=${BUILDS:-now=build}
OPS=${OPS:-all_reduce,sendrecv}
ROUNDS=${ROUNDS:-3}
ITERS=${ITERS:-200}
MIN_BYTES=${MIN_BYTES:-8}
MAX_BYTES=${MAX_BYTES:-1M}
STEP=${STEP:-2}
OUT=${OUT:-/tmp/braid-latency-modes}
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

mkdir -p "$OUT"
rm -f "$OUT"/*.json
log "load before: $(cat /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  for op in ${OPS//,/ }; do
    for build in $BUILDS; do
      name=${build%%=*}
      dir=${build#*=}
      for cp in 1 0; do
        for calls in blocking async; do
          json="$OUT/$name.$op.cp$cp.$calls.r$round.json"
          BRAID_CALLER_PROGRESS=$cp timeout 300 "$dir/tools/braidrun/braidrun" --standalone --nproc-per-node 2 \
            "$dir/tools/braid_perf/braid-perf" --op "$op" --calls "$calls" -b "$MIN_BYTES" -e "$MAX_BYTES" -f "$STEP" \
            -n "$ITERS" -w 10 -c 0 --json "$json" > "$OUT/last-run.log" 2>&1 ||
            { log "failed: $name $op cp=$cp $calls"; cat "$OUT/last-run.log" >&2; exit 1; }
        done
      done
    done
  done
  log "round $round of $ROUNDS done"
done
log "load after: $(cat /proc/loadavg)"

python3 - "$OUT" "$BUILDS" "$OPS" > "$OUT/table.md" <<'EOF'
import glob, json, os, statistics, sys
out, builds, ops = sys.argv[1], [b.split("=")[0] for b in sys.argv[2].split()], sys.argv[3].split(",")
cells = {}  # (op, build, cp, calls) -> bytes -> [us per round]
for path in glob.glob(os.path.join(out, "*.json")):
    name, op, cp, calls, _ = os.path.basename(path)[:-len(".json")].split(".")
    for row in json.load(open(path))["rows"]:
        cells.setdefault((op, name, cp, calls), {}).setdefault(row["bytes"], []).append(row["out_of_place"]["time_us"])
print("us per operation, median of rounds; CP = BRAID_CALLER_PROGRESS")
for op in ops:
    cols = [(b, cp, calls) for b in builds for cp in ("cp1", "cp0") for calls in ("blocking", "async")]
    print(f"\n{op}\n")
    print("| bytes | " + " | ".join(f"{b} CP={cp[2]} {calls}" for b, cp, calls in cols) + " |")
    print("|---:|" + "---:|" * len(cols))
    sizes = sorted({s for k, v in cells.items() if k[0] == op for s in v})
    for s in sizes:
        vals = [cells.get((op, b, cp, calls), {}).get(s) for b, cp, calls in cols]
        print(f"| {s} | " + " | ".join(f"{statistics.median(v):.1f}" if v else "-" for v in vals) + " |")
EOF
cat "$OUT/table.md"
