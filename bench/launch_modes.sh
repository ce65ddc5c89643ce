#!/usr/bin/env bash
# bench/launch_modes.sh - small-operation latency in every way ranks get launched, braid beside
# Open MPI in one run: a 4 KiB all_reduce (f32 sum), ranks on this host, with the few iterations
# nccl-tests and a training job's first steps run (-n 20 -w 5) and with many (-n 1000), each mode
# on a quiet machine and with one busy loop per CPU beside the ranks.
#
#   bench/launch_modes.sh                       # this tree's build, 5 rounds, ~3 min on 2 CPUs
#   ROUNDS=9 LOADS="quiet" bench/launch_modes.sh
#   BUILDS="before=../base/build after=build" bench/launch_modes.sh   # braid builds side by side
#
# Modes (braid under braidrun, Open MPI's mpi_bench from ../shared/bench under mpirun, vader):
#   bound    braidrun's default (a CPU each)            mpirun's default (--bind-to core)
#   unbound  braidrun --cpu-bind none (as torchrun,      mpirun --bind-to none
#            mp.spawn, srun without --cpu-bind)
#   4 ranks  4 ranks on this host (more than 2 CPUs:     mpirun -np 4 --oversubscribe
#            braidrun binds none)
# Each cell: the median over rounds of each run's figure (braid-perf's median over iterations,
# out of place, max over ranks; mpi_bench's median, in place, max over ranks; its warm-up is
# iterations/10, at least 2). Rounds interleave every cell, so a noisy machine hits each alike.
# Last column: braid / Open MPI (below 1: braid is faster). mpi_bench takes -n as its iteration
# count. The floor column (2-rank modes) is bench/shm_exchange_floor.c: the same exchange with
# nothing but the data's own movement (copy in, read, reduce), timed the same way, in the same
# round: what this machine allows at all. Output: the table on stdout and in $OUT/table.md, every
# run's output in $OUT/runs.log.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILDS=${BUILDS:-braid=build}
ROUNDS=${ROUNDS:-5}
LOADS=${LOADS:-quiet busy}
SIZE=${SIZE:-4096}
OUT=${OUT:-/tmp/braid-launch-modes}
ANCHORS=${ANCHORS:-$(cd "$(dirname "$0")/../.." && pwd)/shared/bench}
[ -d "$ANCHORS" ] || ANCHORS=/work/shared/bench
mkdir -p "$OUT"
: > "$OUT/runs.log"
: > "$OUT/cells.tsv"
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

mpi_bench=""
if command -v mpicc >/dev/null && command -v mpirun >/dev/null && [ -f "$ANCHORS/src/mpi_bench.c" ]; then
  mpicc -O2 -o "$OUT/mpi_bench" "$ANCHORS/src/mpi_bench.c" -lm && mpi_bench="$OUT/mpi_bench"
else
  log "Open MPI not installed: its column is left out (BRAID_SETUP_ANCHORS=1 scripts/setup.sh installs it)"
fi

floor_bench=""
if command -v cc >/dev/null; then
  cc -O2 -o "$OUT/shm_exchange_floor" bench/shm_exchange_floor.c && floor_bench="$OUT/shm_exchange_floor"
fi

busy_pids=()
start_busy() {
  local i
  for i in $(seq 1 "$(nproc)"); do
    (while :; do :; done) &
    busy_pids+=($!)
  done
}
stop_busy() {
  [ ${#busy_pids[@]} -eq 0 ] || kill "${busy_pids[@]}" 2>/dev/null || true
  wait "${busy_pids[@]}" 2>/dev/null || true
  busy_pids=()
}
trap stop_busy EXIT

# MODE NP -> braidrun's and mpirun's launch flags
braid_flags() {
  case $1 in
    bound) echo "--nproc-per-node 2" ;;
    unbound) echo "--nproc-per-node 2 --cpu-bind none" ;;
    4ranks) echo "--nproc-per-node 4" ;;
  esac
}
mpi_flags() {
  case $1 in
    bound) echo "-np 2 --bind-to core" ;;
    unbound) echo "-np 2 --bind-to none" ;;
    4ranks) echo "-np 4 --oversubscribe" ;;
  esac
}
ITER_SETS=("20 5" "1000 20")

cell() {  # load mode iters lib figure
  printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$OUT/cells.tsv"
}

run_braid() {  # name dir mode iters warmup -> median us, or "fail"
  local dir=$2 mode=$3 n=$4 w=$5 out
  # shellcheck disable=SC2046
  if out=$(timeout 300 "$dir/tools/braidrun/braidrun" --standalone $(braid_flags "$mode") \
      "$dir/tools/braid_perf/braid-perf" -b "$SIZE" -e "$SIZE" -n "$n" -w "$w" -c 0 2>&1); then
    printf '%s\n' "$out" | sed "s/^/$1 $mode -n $n: /" >> "$OUT/runs.log"
    printf '%s\n' "$out" | awk -v s="$SIZE" '$3 == s { print $9; exit }'
  else
    printf '%s\n' "$out" | sed "s/^/$1 $mode -n $n FAILED: /" >> "$OUT/runs.log"
    echo fail
  fi
}

run_mpi() {  # mode iters -> median us
  local out
  # shellcheck disable=SC2046
  out=$(timeout 300 mpirun --allow-run-as-root $(mpi_flags "$1") --mca btl self,vader \
    "$mpi_bench" --min-bytes "$SIZE" --max-bytes "$SIZE" --min-iters "$2" --max-iters "$2" 2>&1) || true
  printf '%s\n' "$out" | sed "s/^/mpi $1 -n $2: /" >> "$OUT/runs.log"
  printf '%s\n' "$out" | awk -F'\t' '$1 == "RESULT" { print $7; found = 1 } END { if (!found) print "fail" }'
}

run_floor() {  # mode iters warmup -> median us
  local out bind=1
  [ "$1" = unbound ] && bind=0
  out=$(timeout 300 "$floor_bench" --bytes "$SIZE" --iters "$2" --warmup "$3" --bind "$bind" 2>&1) || true
  printf '%s\n' "$out" | sed "s/^/floor $1 -n $2: /" >> "$OUT/runs.log"
  printf '%s\n' "$out" | awk -F'\t' '$1 == "RESULT" { print $5; found = 1 } END { if (!found) print "fail" }'
}

log "load before: $(cat /proc/loadavg)"
for load in $LOADS; do
  [ "$load" = busy ] && start_busy
  for round in $(seq 1 "$ROUNDS"); do
    for mode in bound unbound 4ranks; do
      for set in "${ITER_SETS[@]}"; do
        read -r n w <<<"$set"
        for build in $BUILDS; do
          cell "$load" "$mode" "$n" "${build%%=*}" "$(run_braid "${build%%=*}" "${build#*=}" "$mode" "$n" "$w")"
        done
        [ -z "$mpi_bench" ] || cell "$load" "$mode" "$n" "Open MPI" "$(run_mpi "$mode" "$n")"
        [ -z "$floor_bench" ] || [ "$mode" = 4ranks ] || cell "$load" "$mode" "$n" "floor" "$(run_floor "$mode" "$n" "$w")"
      done
    done
    log "$load: round $round of $ROUNDS done"
  done
  stop_busy
done
log "load after: $(cat /proc/loadavg)"

python3 - "$OUT/cells.tsv" "$BUILDS" "$SIZE" <<'EOF' | tee "$OUT/table.md"
import statistics, sys
cells, builds, size = sys.argv[1], [b.split("=")[0] for b in sys.argv[2].split()], sys.argv[3]
runs = {}
for line in open(cells):
    load, mode, n, lib, v = line.rstrip("\n").split("\t")
    runs.setdefault((load, mode, n, lib), []).append(v)
def med(vals):
    ok = [float(v) for v in vals if v != "fail"]
    return statistics.median(ok) if ok else None
libs = builds + [x for x in ("Open MPI", "floor") if any(k[3] == x for k in runs)]
names = {"bound": "2 ranks, bound (braidrun / mpirun default)",
         "unbound": "2 ranks, unbound (--cpu-bind none / --bind-to none)",
         "4ranks": "4 ranks on this host"}
print(f"{size} B all_reduce, median us over rounds (fails: runs that failed)\n")
head = "| load | launch | iterations | " + " | ".join(libs)
if "Open MPI" in libs:
    head += " | " + " | ".join(f"{b} / Open MPI" for b in builds)
print(head + " |")
print("|" + "---|" * (3 + len(libs) + (len(builds) if "Open MPI" in libs else 0)))
seen = []
for k in runs:
    if k[:3] not in seen:
        seen.append(k[:3])
for load, mode, n in seen:
    row = [load, names.get(mode, mode), "-n 20 -w 5" if n == "20" else f"-n {n}"]
    vals = {}
    for lib in libs:
        v = runs.get((load, mode, n, lib), [])
        vals[lib] = med(v)
        fails = sum(1 for x in v if x == "fail")
        row.append(("-" if vals[lib] is None else f"{vals[lib]:.2f}") + (f" ({fails} failed)" if fails else ""))
    if "Open MPI" in libs:
        for b in builds:
            row.append("-" if not vals[b] or not vals["Open MPI"] else f"{vals[b] / vals['Open MPI']:.2f}")
    print("| " + " | ".join(row) + " |")
EOF
