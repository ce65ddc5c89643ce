#!/usr/bin/env bash
# The library's spin rule (runtime/links/spin_policy.h) against the fixed spin it replaced: braid-perf
# all_reduce of one size under braidrun, for each rank count and binding, with BRAID_SPIN_US=50
# set (the old default everywhere) and unset (the rule), interleaved over rounds; medians of
# braid-perf's per-size time (itself the median of its iterations, in place), and old / new.
#
#   bench/spin_rule.sh                               # ~2 min on 2 CPUs
#   NPROCS="2 4 8" BINDS="auto none" ROUNDS=9 SIZE=64K bench/spin_rule.sh
#   TASKSET=0 NPROCS="2 3" BINDS=none bench/spin_rule.sh   # braidrun under taskset -c 0
#
# braidrun's --cpu-bind auto gives each rank its own share of the CPUs when there is at least
# one CPU per rank, and leaves them free otherwise; none always leaves them free (torchrun,
# mp.spawn). Each run's INFO line says which spin the rule chose (column "rule").
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
NPROCS=${NPROCS:-2 4}
BINDS=${BINDS:-auto none}
ROUNDS=${ROUNDS:-7}
SIZE=${SIZE:-4K}
ITERS=${ITERS:-300}
TASKSET=${TASKSET:-}
OUT=${OUT:-$BUILD_DIR/spin-rule}
mkdir -p "$OUT"
: > "$OUT/runs.log"
BRAIDRUN=$BUILD_DIR/tools/braidrun/braidrun
launch=()
if [ -n "$TASKSET" ]; then launch=(taskset -c "$TASKSET"); fi
PERF=$BUILD_DIR/tools/braid_perf/braid-perf

one() {  # nproc bind variant -> "time_us rule"
  local np=$1 bind=$2 variant=$3 out
  if [ "$variant" = old ]; then
    out=$(BRAID_SPIN_US=50 BRAID_DEBUG=INFO timeout 120 "${launch[@]}" "$BRAIDRUN" --standalone --nproc-per-node "$np" \
          --cpu-bind "$bind" "$PERF" -b "$SIZE" -e "$SIZE" -n "$ITERS" -w 20 2>&1)
  else
    out=$(env -u BRAID_SPIN_US BRAID_DEBUG=INFO timeout 120 "${launch[@]}" "$BRAIDRUN" --standalone --nproc-per-node "$np" \
          --cpu-bind "$bind" "$PERF" -b "$SIZE" -e "$SIZE" -n "$ITERS" -w 20 2>&1)
  fi
  printf '%s\n' "$out" | sed "s/^/np=$np bind=$bind $variant: /" >> "$OUT/runs.log"
  local t rule
  t=$(printf '%s\n' "$out" | awk '/^\[rank 0\] +[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+/ {print $13; exit}')
  rule=$(printf '%s\n' "$out" | grep -o 'INFO: spin [0-9]* us' | head -1 | awk '{print $3}')
  echo "${t:-NA} ${rule:-?}"
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "NA"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, all_reduce $SIZE, $ROUNDS rounds${TASKSET:+, braidrun under taskset -c $TASKSET}"
declare -A times rules
for ((r = 1; r <= ROUNDS; ++r)); do
  for np in $NPROCS; do
    for bind in $BINDS; do
      for variant in old new; do
        read -r t rule < <(one "$np" "$bind" "$variant")
        times[$np,$bind,$variant]+="$t "
        rules[$np,$bind,$variant]=$rule
      done
    done
  done
done
echo "| ranks | --cpu-bind | BRAID_SPIN_US=50 us | unset us (rule's spin) | old / new | rounds old | rounds new |"
echo "|---:|---|---:|---:|---:|---|---|"
for np in $NPROCS; do
  for bind in $BINDS; do
    o=$(tr ' ' '\n' <<< "${times[$np,$bind,old]}" | grep -v '^$' | grep -v NA | median)
    n=$(tr ' ' '\n' <<< "${times[$np,$bind,new]}" | grep -v '^$' | grep -v NA | median)
    ratio=$(awk -v o="$o" -v n="$n" 'BEGIN {if (n > 0) printf "%.2f", o / n; else print "NA"}')
    echo "| $np | $bind | $o | $n (${rules[$np,$bind,new]}) | $ratio | ${times[$np,$bind,old]}| ${times[$np,$bind,new]}|"
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
