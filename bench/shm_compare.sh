#!/usr/bin/env bash
# bench/shm_compare.sh - the shm transport beside tcp over loopback, Open MPI's shared-memory
# BTL (vader) and single-thread memcpy, in one run, rounds interleaved so a noisy VM hits each
# the same way.
#
#   bench/shm_compare.sh [BUILD_DIR]        (default: build)
#   ROUNDS=3 NS="2 4" MAX=64M bench/shm_compare.sh
#   ONLY=sendrecv ROUNDS=7 NS=2 bench/shm_compare.sh   (only sendrecv of MAX and the memcpy rows)
#
# Per round and world size N: braid-perf all_reduce 4 KiB..MAX (x4 steps; -n 500 -w 200 up to
# 64 KiB, -n 20 -w 5 above, as Open MPI's mpi_bench takes up to 1000 iterations where they are
# cheap), sendrecv 4 KiB (latency) and sendrecv MAX (bandwidth: every rank sends MAX to the next
# and receives MAX from the previous at once) over shm (its default, BRAID_SHM_CMA=auto: the
# two-copy ring for buffers on 4 KiB pages; shm-cma: BRAID_SHM_CMA=1) and over tcp; Open MPI's
# mpi_bench from ../shared/bench with `--mca btl self,vader` when mpicc/mpirun are installed
# (BRAID_SETUP_ANCHORS=1 scripts/setup.sh).
# With 2 ranks also: memcpy of MAX by one thread (../shared/bench/src/memcpy_bench.c, the
# yardstick issue 20 names), and the same sendrecv and memcpy with the buffers on transparent
# huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1: malloc advises MADV_HUGEPAGE; variants
# *-thp; shm-ring-thp: BRAID_SHM_CMA=0), and all_reduce 1 MiB..MAX so with auto and with 1,
# where cross-memory attach copies as fast as memcpy (bench/shm_cma_bench.c shows why:
# process_vm_readv pins and copies 4 KiB pages one by one). THP=0 leaves the *-thp rows out.
# Last, bench/shm_cma_bench.c's table (memcpy against process_vm_readv by page size and call size).
# Prints RESULT rows (../shared/bench's format) with the library column naming the transport;
# the summary at the end gives each row's median over the rounds.
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
NS=${NS:-2 4}
THP=${THP:-1}
MAX=${MAX:-64M}
ONLY=${ONLY:-}
ANCHORS=${ANCHORS:-$(cd "$(dirname "$0")/../.." && pwd)/shared/bench}
[ -d "$ANCHORS" ] || ANCHORS=/work/shared/bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

mpi_bench=""
if command -v mpicc > /dev/null && command -v mpirun > /dev/null && [ -f "$ANCHORS/src/mpi_bench.c" ]; then
  mpicc -O2 -o "$out/mpi_bench" "$ANCHORS/src/mpi_bench.c" -lm && mpi_bench="$out/mpi_bench"
else
  echo "# Open MPI not installed: its rows are left out (BRAID_SETUP_ANCHORS=1 scripts/setup.sh)" >&2
fi
max_bytes=$(numfmt --from=iec "$MAX")
memcpy_bench=""
if [ -f "$ANCHORS/src/memcpy_bench.c" ] && cc -O2 -o "$out/memcpy_bench" "$ANCHORS/src/memcpy_bench.c"; then
  memcpy_bench="$out/memcpy_bench"
else
  echo "# memcpy_bench.c not found in $ANCHORS: the memcpy rows are left out" >&2
fi
thp_env=GLIBC_TUNABLES=glibc.malloc.hugetlb=1

memcpy_row() {  # label [env...]: memcpy_bench's memcpy line as a RESULT row (GB/s in both bw columns)
  local label=$1
  shift
  [ -n "$memcpy_bench" ] || return 0
  env "$@" "$memcpy_bench" "$max_bytes" 20 | awk -F'\t' -v l="$label" \
    '$3 == "memcpy" { printf "RESULT\t%s\tmemcpy-1thread\t1\t%s\t%s\t%s\t%s\t%s\t%s\t%s\tok\n", l, $5, $6, $7, $8, $7, $9, $9 }'
}

perf() {  # variant N op -b -e iterations warmup
  # Variants: shm (BRAID_SHM_CMA unset: auto), shm-ring (0), shm-cma (1), tcp; a -thp suffix
  # puts the buffers on transparent huge pages.
  local v=$1 transport=shm cma="" thp=""
  case $v in tcp) transport=tcp ;; esac
  case $v in shm-cma*) cma=BRAID_SHM_CMA=1 ;; shm-ring*) cma=BRAID_SHM_CMA=0 ;; esac
  case $v in *-thp) thp=$thp_env ;; esac
  env -u BRAID_SHM_CMA $thp $cma BRAID_TRANSPORT=$transport timeout 300 "$BUILD/tools/braidrun/braidrun" \
    --standalone --nproc-per-node "$2" "$BUILD/tools/braid_perf/braid-perf" --op "$3" -b "$4" -e "$5" -f 4 -n "$6" \
    -w "$7" --result-rows 2>&1 | sed -n 's/^\[rank 0\] RESULT\tbraid\t/RESULT\tbraid-'"$v"'\t'"$3"'-/p'
}

for round in $(seq "$ROUNDS"); do
  for n in $NS; do
    echo "# round $round, $n ranks, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    for t in shm shm-cma tcp; do
      # Small sizes get many iterations (their median is a few microseconds), large ones few;
      # the first size of a run needs a long warm-up (its first ~100 calls are slower).
      if [ "$ONLY" != sendrecv ]; then
        perf "$t" "$n" all_reduce 4K 64K 500 200
        perf "$t" "$n" all_reduce 256K "$MAX" 20 5
        perf "$t" "$n" sendrecv 4K 4K 500 200
      fi
      perf "$t" "$n" sendrecv "$MAX" "$MAX" 20 5
    done
    if [ "$n" = 2 ]; then
      memcpy_row memcpy
      if [ "$THP" = 1 ]; then
        for t in shm-thp shm-ring-thp shm-cma-thp; do
          perf "$t" 2 sendrecv "$MAX" "$MAX" 20 5
        done
        if [ "$ONLY" != sendrecv ]; then
          perf shm-thp 2 all_reduce 1M "$MAX" 20 5
          perf shm-cma-thp 2 all_reduce 1M "$MAX" 20 5
        fi
        memcpy_row memcpy-thp "$thp_env"
      fi
    fi
    if [ -n "$mpi_bench" ] && [ "$ONLY" != sendrecv ]; then
      timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$n" --mca btl self,vader \
        "$mpi_bench" --label all_reduce-vader --min-bytes 4096 --max-bytes "$max_bytes" --max-iters 200 |
        grep '^RESULT' | sed 's/^RESULT\tmpi\t/RESULT\topenmpi-shm\t/' || echo "# mpi_bench failed" >&2
    fi
  done
done | tee "$out/rows"

echo
echo "# medians over $ROUNDS round(s): library op n bytes median_us busbw_GBps (sendrecv, memcpy: GB/s moved per rank)"
awk -F'\t' '$1 == "RESULT" { k = $2 "\t" $3 "\t" $4 "\t" $5; t[k] = t[k] " " $7; b[k] = b[k] " " $11 }
  END { for (k in t) print k "\t" t[k] "\t" b[k] }' "$out/rows" |
  python3 -c '
import sys, statistics
rows = []
for line in sys.stdin:
    lib, op, n, size, times, bws = line.rstrip("\n").split("\t")
    rows.append((op.split("-")[0], int(n), int(size), lib, statistics.median(map(float, times.split())),
                 statistics.median(map(float, bws.split()))))
for op, n, size, lib, t, bw in sorted(rows):
    print(f"{lib:14} {op:12} n={n} {size:>10} {t:12.2f} us {bw:8.3f} GB/s")
'

if [ "$ONLY" != sendrecv ] && cc -O2 -pthread -o "$out/shm_cma_bench" "$(dirname "$0")/shm_cma_bench.c"; then
  echo
  echo "# bench/shm_cma_bench.c, $MAX: kind-pages-call median_us GB/s per copying process"
  "$out/shm_cma_bench" "$max_bytes" 9 | awk -F'\t' '{ printf "%-26s %10s us %8s GB/s\n", $3, $7, $9 }'
fi
