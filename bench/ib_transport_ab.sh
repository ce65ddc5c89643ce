#!/usr/bin/env bash
# bench/ib_transport_ab.sh - the ib transport's own cost, two builds side by side in one boot of
# the emulated Soft-RoCE guest (scripts/rdma_guest.sh): what a change to transport/ib/ did to
# its instructions per message and to its 8 B exchange time.
#
# Each of ROUNDS rounds runs ib_write_lat 8 B (the yardstick), then ib_pingpong_bench --exchange
# of build A and of build B, their order alternating per round. Then the transport's user-space
# instructions per ping-pong round trip (both ends, two messages): callgrind's count for 600
# round trips minus the one for 200, divided by 400, so set-up cancels out, in all and per
# function (self cost). Twice: as bench/ib_latency_parts.sh counts it (the two ends on two
# threads), and with --one-thread (both ends driven by one thread, so the count does not depend
# on how the threads interleaved or whether a wait slept; needs a build whose
# ib_pingpong_bench has that option). CG_REPEAT=0: the timings only.
# Prints the medians of the rounds and the median of the per-round ratios to ib_write_lat.
# Only ratios within one boot mean anything (docs/ib.md). KEEP=DIR keeps the callgrind files.
#
#   A=/work/main/build B=build ROUNDS=5 bench/ib_transport_ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
A=$(realpath -m "${A:-/work/main/build}")
B=$(realpath -m "${B:-build}")
KEEP=${KEEP:-}
if [ "${1:-}" != --in-guest ]; then
  export ROUNDS A B KEEP
  exec scripts/rdma_guest.sh bash bench/ib_transport_ab.sh --in-guest
fi

pair=scripts/rdma_guest/perftest_pair.sh
for b in "$A" "$B"; do
  [ -x "$b/bench/transport/ib_pingpong_bench" ] || { echo "ib_transport_ab: $b/bench/transport/ib_pingpong_bench is not built" >&2; exit 1; }
done
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

exchange() { timeout -k 5 120 "$1/bench/transport/ib_pingpong_bench" --iters 2000 --exchange 2>&1 | awk -F'\t' '$1 == "RESULT" { print $2 }'; }
add() { [ -n "$2" ] && echo "$2" >> "$results/$1" || echo "ib_transport_ab: round $round: $1 failed" >&2; }

for round in $(seq "$ROUNDS"); do
  echo "ib_transport_ab: round $round of $ROUNDS" >&2
  add write_lat "$("$pair" ib_write_lat 18601 -s 8 -n 1000 -F | awk '$1 == 8 && $2 ~ /^[0-9]+$/ { print $5; exit }')"
  if [ $((round % 2)) = 1 ]; then
    add exchange_a "$(exchange "$A")"; add exchange_b "$(exchange "$B")"
  else
    add exchange_b "$(exchange "$B")"; add exchange_a "$(exchange "$A")"
  fi
done

median() { sort -g "$results/$1" | awk '{ v[NR] = $1 } END { if (NR) printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else printf "-" }'; }
ratio() {
  paste "$results/$1" "$results/write_lat" 2>/dev/null | awk '{ print $1 / $2 }' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR) printf "%.2fx", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; else printf "-" }'
}
rounds() { paste -sd' ' "$results/$1"; }
echo
echo "8 B, Soft-RoCE in the emulated guest, $ROUNDS rounds (medians; ratio: median of per-round ratios; then each round)"
echo "A = $A"
echo "B = $B"
printf '%-40s %8s %9s  %s\n' "" us "/write_lat" rounds
for row in "write_lat:ib_write_lat 8 B (t_typical)" "exchange_a:transport exchange 8 B, A" "exchange_b:transport exchange 8 B, B"; do
  printf '%-40s %8s %9s  %s\n' "${row#*:}" "$(median "${row%%:*}")" "$(ratio "${row%%:*}")" "$(rounds "${row%%:*}")"
done

[ "${CG_REPEAT:-3}" != 0 ] || exit 0  # timings only
command -v valgrind > /dev/null || { echo "ib_transport_ab: no valgrind, no instruction counts" >&2; exit 0; }
# Which path a message takes depends on timing when the ends are two threads (a wait that sleeps
# arms the CQs; a CTS held past its bound is written), so the counts move between runs:
# CG_REPEAT runs per build and mode, alternating, and the table of the run with the median total.
CG_REPEAT=${CG_REPEAT:-3}
for rep in $(seq "$CG_REPEAT"); do
  for side in A B 1A 1B; do
    last=${side: -1}; dir=${!last}
    flag=; [ "${side:0:1}" = 1 ] && flag=--one-thread
    for n in 200 600; do
      BRAID_SPIN_US=0 timeout -k 5 300 valgrind --tool=callgrind --callgrind-out-file="$results/cg$side$rep.$n" \
        "$dir/bench/transport/ib_pingpong_bench" --iters "$n" --warmup 20 $flag > "$results/out$side$rep.$n" 2>&1 ||
        echo "ib_transport_ab: callgrind run $rep of $side, $n round trips, failed" >&2
      callgrind_annotate "$results/cg$side$rep.$n" 2>/dev/null |
        sed -nE 's/^ *([0-9,]+) +\( *[0-9.]+%\) +(.*)$/\1\t\2/p' | sed -E 's/ \[[^]]*\]$//' | tr -d , > "$results/cg$side$rep.$n.txt"
    done
    awk -F'\t' 'NR == FNR { s[$2] += $1; next } { l[$2] += $1 }
         END { for (k in l) { d = (l[k] - s[k]) / 400; if (k == "PROGRAM TOTALS") printf "%.0f\tall\n", d
                              else if (d >= 40) printf "%.0f\t%s\n", d, substr(k, 1, 100) } }' \
      "$results/cg$side$rep.200.txt" "$results/cg$side$rep.600.txt" | sort -t$'\t' -k1,1gr > "$results/fn$side$rep"
    total=$(awk -F'\t' '$2 == "all" { print $1 }' "$results/fn$side$rep")
    sleeps=$(awk -F'\t' '$1 == "RESULT" { print $7 }' "$results/out$side$rep.600")
    echo "$total $rep $sleeps" >> "$results/totals$side"
  done
done
for side in A B 1A 1B; do
  echo
  echo "transport ping-pong, build ${side: -1}$([ "${side:0:1}" = 1 ] && echo ", both ends on one thread"): user-space instructions per round trip (callgrind; both ends, 2 messages)"
  echo "  runs (total, sleeps per round trip): $(sort -g "$results/totals$side" | awk '{ printf "%s%s (%s)", (NR > 1 ? ", " : ""), $1, $3 }')"
  rep=$(sort -g "$results/totals$side" | awk '{ v[NR] = $2 } END { print v[int((NR + 1) / 2)] }')
  echo "  the median run, self cost per function (>= 40):"
  awk -F'\t' '{ printf "  %7s  %s\n", $1, $2 }' "$results/fn$side$rep"
done
if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && cp "$results"/cg* "$results"/out* "$results"/fn* "$KEEP"/; fi
