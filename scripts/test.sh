#!/usr/bin/env bash
# Builds braid twice with warnings as errors - once with every optional feature this machine
# has (io_uring, verbs, CUDA), once with all of them disabled - and runs every test in both;
# then a third time with AddressSanitizer, for the communicator lifetime tests, device staging
# and the shared-CPU path.
# Usage: scripts/test.sh [extra meson test args, e.g. --suite store]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. scripts/build_progress.sh

configure() {
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    echo "== configuring $dir"
    meson setup "$dir" "$@" >/dev/null
  fi
}

status=0
for variant in full minimal; do
  dir=build-ci-$variant
  if [ $variant = full ]; then
    configure "$dir" -Dwerror=true -Dliburing=auto -Dibverbs=auto -Dcuda=auto -Dtorch=auto
  else
    configure "$dir" -Dwerror=true -Dliburing=disabled -Dibverbs=disabled -Dcuda=disabled -Dtorch=disabled
  fi
  echo "== $variant build: $(meson introspect "$dir" --buildoptions | python3 -c '
import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print(", ".join(f"{k}={opts[k]}" for k in ("liburing", "ibverbs", "cuda", "torch", "werror")))')"
  build_with_progress "$variant build" -C "$dir"
  if ! meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2 "$@"; then
    status=1
  fi
done

# A third build with AddressSanitizer, for what /proc/self/fd counts cannot see: a communicator
# destroyed after a clean end, an abort or a failed peer must leave no leaked object and touch
# nothing it freed (valgrind cannot follow io_uring's kernel-side writes, ASan does not need to).
# Only the lifetime cases are built and run (in-process on io_uring, epoll and inproc; across
# rank processes for abort, destroy and a SIGKILLed peer): about 2 minutes on 2 cores from an
# empty build directory, 15 s when it is up to date (11 s of which are the tests). Rank
# processes write their reports to files (log_path), so a report from a child whose exit code a
# test does not check still fails the run. Skipped when arguments select other tests.
if [ $# -eq 0 ]; then
  dir=build-ci-asan
  configure "$dir" -Dwerror=true -Db_sanitize=address -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dliburing=enabled -Dibverbs=disabled -Dcuda=disabled -Dtorch=disabled -Dbenchmarks=false
  echo "== asan build: lifetime tests (io_uring, epoll, inproc), device-buffer staging (fake device), shared-CPU path"
  build_with_progress "asan build" -C "$dir" tests/runtime/async/lifetime_test \
    tests/runtime/async/async_lifetime_asan_test tests/runtime/async/async_rank \
    tests/runtime/device/device_staging_test tests/transport/shared_cpu_path_test
  asan_logs=$PWD/$dir/asan-reports
  rm -rf "$asan_logs" && mkdir -p "$asan_logs"
  if ! ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:log_path=$asan_logs/report \
      meson test -C "$dir" --no-rebuild --print-errorlogs lifetime async_lifetime_asan device_staging \
        transport_shared_cpu_path; then
    status=1
  fi
  if compgen -G "$asan_logs/report*" >/dev/null; then
    for f in "$asan_logs"/report*; do echo "== AddressSanitizer report $f"; cat "$f"; done
    status=1
  fi
fi
exit $status
