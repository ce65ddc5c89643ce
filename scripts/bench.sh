#!/usr/bin/env bash
# The main job: builds braid and runs a collective benchmark with N ranks on this machine,
# printing a table like nccl-tests' (size, time, algbw, busbw, #wrong).
# Usage: scripts/bench.sh [braid-perf options]     NPROC=4 scripts/bench.sh --op all_gather
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/build_progress.sh
if [ ! -f build/build.ninja ]; then
  echo "== configuring build/"
  meson setup build >/dev/null
fi
build_with_progress "build (braid, braidrun, braid-perf, tests)" -C build
nproc_per_node=${NPROC:-2}
if [ $# -eq 0 ]; then
  set -- --op all_reduce -b 4K -e 64M -f 4 -n 20 -w 5 -c 1 -d f32
fi
exec build/tools/braidrun/braidrun --standalone --nproc-per-node "$nproc_per_node" \
  build/tools/braid_perf/braid-perf "$@"
