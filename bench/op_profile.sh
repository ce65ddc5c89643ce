#!/usr/bin/env bash
# Where one small operation's instructions go, per function: rank 0 of a 2-rank braid-perf run
# under callgrind, inside braid-perf's timed call only (as bench/op_instructions.sh counts), the
# difference between a run of 3N and one of N iterations divided by the operations of 2N
# iterations, so set-up and warm-up cancel out. Prints "instructions<TAB>function", largest
# first: inclusive (a function with everything it calls) by default, SELF=1 for each function's
# own. Rank 0's polls while it waits for rank 1 are in it, as in op_instructions.sh.
#
#   bench/op_profile.sh build all_reduce 4096            # inclusive, 4 KiB all_reduce
#   SELF=1 N=300 bench/op_profile.sh build sendrecv 8    # self costs, 8 B sendrecv
#   TRANSPORT=tcp bench/op_profile.sh build all_reduce 8
# Needs valgrind (Debian package; callgrind_annotate is in it).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || { echo "usage: bench/op_profile.sh BUILD_DIR OP BYTES" >&2; exit 2; }
build=$1 op=$2 bytes=$3
N=${N:-300}
TRANSPORT=${TRANSPORT:-shm}
inclusive=yes; [ "${SELF:-0}" = 1 ] && inclusive=no
command -v valgrind > /dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
perf=$build/tools/braid_perf/braid-perf
braidrun=$build/tools/braidrun/braidrun
[ -x "$perf" ] && [ -x "$braidrun" ] || { echo "build $build first (braid-perf, braidrun)" >&2; exit 1; }
forms=2
case $op in sendrecv | barrier) forms=1 ;; esac  # no in-place form
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

profile() { # iterations out -> "instructions<TAB>function" lines of rank 0's run
  BENCH_TOGGLE='*run_blocking*' BRAID_TRANSPORT=$TRANSPORT timeout 600 "$braidrun" --standalone --nproc-per-node 2 -- sh -c \
    'if [ "$LOCAL_RANK" = 0 ]; then exec valgrind --tool=callgrind --toggle-collect="$BENCH_TOGGLE" --callgrind-out-file="'"$tmp"'/cg" "$0" "$@"; else exec "$0" "$@"; fi' \
    "$perf" --op "$op" -b "$bytes" -e "$bytes" -n "$1" -w 10 -c 0 > /dev/null 2>&1
  callgrind_annotate --inclusive="$inclusive" --threshold=100 "$tmp/cg" 2> /dev/null |
    awk '/^ *[0-9,]+ \(/ { c = $1; gsub(",", "", c); sub(/^ *[0-9,]+ \([^)]*\) +/, ""); sub(/ \[.*$/, ""); print c "\t" $0 }' > "$2"
}
profile "$N" "$tmp/short"
profile $((3 * N)) "$tmp/long"
awk -F'\t' -v d=$((2 * N * forms)) 'NR == FNR { s[$2] = $1; next } { v = int(($1 - s[$2]) / d); if (v > 20) print v "\t" $2 }' \
  "$tmp/short" "$tmp/long" | sort -rn | sed 's/^\([0-9]*\t\)???:/\1/'
