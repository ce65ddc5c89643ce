#!/usr/bin/env bash
# Builds braid twice with warnings as errors - once with every optional feature this machine
# has (io_uring, verbs, CUDA), once with all of them disabled - and runs every test in both;
# then a third time with AddressSanitizer, for the communicator lifetime tests, device staging
# and the shared-CPU path. At the end it prints how long each phase took (set-up, each build,
# each test run) and, per test run, each suite's time and the slowest tests (docs/testing.md).
# Usage: scripts/test.sh [extra meson test args, e.g. --suite store]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/build_progress.sh

# Phases and their times, printed at the end whatever happened (a failed build included).
phase_names=()
phase_secs=()
phase_notes=()
reports=()
phase_start=$SECONDS
begin_phase() { phase_start=$SECONDS; }
end_phase() {  # NAME NOTE
  phase_names+=("$1")
  phase_secs+=($((SECONDS - phase_start)))
  phase_notes+=("${2:-}")
}
print_phases() {
  local rc=$? i total=0
  for r in "${reports[@]}"; do [ -f "$r" ] && cat "$r"; done
  echo "== time per phase"
  for i in "${!phase_names[@]}"; do
    printf '   %-22s %5ss  %s\n' "${phase_names[$i]}" "${phase_secs[$i]}" "${phase_notes[$i]}"
    total=$((total + phase_secs[i]))
  done
  printf '   %-22s %5ss  (%s)\n' "total" "$total" "$(elapsed_since 0)"
  exit $rc
}
trap print_phases EXIT

begin_phase
scripts/setup.sh
end_phase "setup" "Debian packages (scripts/setup.sh)"

# The full and minimal builds compile mostly the same sources with the same flags: ccache (when
# present; scripts/setup.sh installs it) lets the second take what the first compiled. Its cache
# lives in the tree, so a fresh clone starts empty and a second run here is quick.
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$PWD/build-ci-ccache}
  ccache --zero-stats >/dev/null 2>&1 || true
fi

configure() {
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    echo "== configuring $dir"
    meson setup "$dir" "$@" >/dev/null
  fi
}

# Runs meson test in DIR and keeps a per-suite report of its times for the end.
run_tests() {  # DIR LABEL MESON_TEST_ARGS...
  local dir=$1 label=$2 rc=0; shift 2
  meson test -C "$dir" --no-rebuild --print-errorlogs "$@" || rc=1
  if [ -f "$dir/meson-logs/testlog.json" ]; then
    python3 scripts/test_times.py "$dir/meson-logs/testlog.json" "$label" >"$dir/test-times.txt" || true
    reports+=("$dir/test-times.txt")
  fi
  return $rc
}

status=0
for variant in full minimal; do
  dir=build-ci-$variant
  begin_phase
  if [ $variant = full ]; then
    configure "$dir" -Dwerror=true -Dliburing=auto -Dibverbs=auto -Dcuda=auto -Dtorch=auto
  else
    configure "$dir" -Dwerror=true -Dliburing=disabled -Dibverbs=disabled -Dcuda=disabled -Dtorch=disabled
  fi
  features=$(meson introspect "$dir" --buildoptions | python3 -c '
import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print(", ".join(f"{k}={opts[k]}" for k in ("liburing", "ibverbs", "cuda", "torch", "werror")))')
  echo "== $variant build: $features"
  build_with_progress "$variant build" -C "$dir"
  end_phase "$variant build" "$features"
  if [ $variant = full ]; then
    # Lock contracts (GUARDED_BY, REQUIRES on braid::Mutex) checked by clang over the units that
    # use them, with the build's flags; and runtime/'s shape (no function over 80 lines, no
    # class over 25 data members). Seconds, no objects written.
    begin_phase
    python3 scripts/thread_safety.py "$dir" || status=1
    python3 scripts/code_shape.py runtime || status=1
    end_phase "lock contracts, shape" "scripts/thread_safety.py, scripts/code_shape.py"
  fi
  begin_phase
  # Two at a time; tests that start rank processes or boot the guest are is_parallel: false
  # and run alone (tests/meson.build).
  if ! run_tests "$dir" "$variant tests" --num-processes 2 "$@"; then
    status=1
  fi
  end_phase "$variant tests" "$dir/meson-logs/testlog.txt"
done

# A third build with AddressSanitizer, for what /proc/self/fd counts cannot see: a communicator
# destroyed after a clean end, an abort or a failed peer must leave no leaked object and touch
# nothing it freed (valgrind cannot follow io_uring's kernel-side writes, ASan does not need to).
# Only the lifetime cases are built and run (in-process on io_uring, epoll and inproc; across
# rank processes for abort, destroy and a SIGKILLed peer). Rank processes write their reports
# to files (log_path), so a report from a child whose exit code a test does not check still
# fails the run. Skipped when arguments select other tests.
if [ $# -eq 0 ]; then
  dir=build-ci-asan
  begin_phase
  # -O1 -g1 (after the build type's -O2 -g): what AddressSanitizer recommends for speed, and line
  # tables are all its reports need; both compile faster than -O2 -g (docs/testing.md).
  configure "$dir" -Dwerror=true -Db_sanitize=address -Db_lundef=false -Dbuildtype=debugoptimized \
    "-Dcpp_args=['-O1','-g1']" -Dliburing=enabled -Dibverbs=disabled -Dcuda=disabled -Dtorch=disabled -Dbenchmarks=false
  echo "== asan build: lifetime tests (io_uring, epoll, inproc), device-buffer staging (fake device), shared-CPU path"
  build_with_progress "asan build" -C "$dir" tests/runtime/async/lifetime_test \
    tests/runtime/async/async_lifetime_asan_test tests/runtime/async/async_rank \
    tests/runtime/device/device_staging_test tests/transport/shared_cpu_path_test
  end_phase "asan build" "only the targets its tests need"
  begin_phase
  asan_logs=$PWD/$dir/asan-reports
  rm -rf "$asan_logs" && mkdir -p "$asan_logs"
  if ! ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:log_path=$asan_logs/report \
      run_tests "$dir" "asan tests" lifetime async_lifetime_asan device_staging transport_shared_cpu_path; then
    status=1
  fi
  if compgen -G "$asan_logs/report*" >/dev/null; then
    for f in "$asan_logs"/report*; do echo "== AddressSanitizer report $f"; cat "$f"; done
    status=1
  fi
  end_phase "asan tests" "$dir/meson-logs/testlog.txt"
fi
if command -v ccache >/dev/null; then
  echo "== ccache: $(ccache --show-stats 2>/dev/null | grep -iE 'hits|misses' | tr -s ' ' | paste -sd';' -)"
fi
exit $status
