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

# Runs meson test in DIR, its logs named LOGBASE (meson-logs/LOGBASE.{txt,json}), and writes a
# per-suite report of its times to DIR/LOGBASE-times.txt, which the end prints.
run_tests() {  # DIR LABEL LOGBASE MESON_TEST_ARGS...
  local dir=$1 label=$2 logbase=$3 rc=0; shift 3
  rm -f "$dir/meson-logs/$logbase.json"
  meson test -C "$dir" --no-rebuild --print-errorlogs --logbase "$logbase" "$@" || rc=1
  if [ -f "$dir/meson-logs/$logbase.json" ]; then
    python3 scripts/test_times.py "$dir/meson-logs/$logbase.json" "$label" >"$dir/$logbase-times.txt" || true
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
  begin_phase
  # The Soft-RoCE guest's suite (ib: one test, one boot, minutes of emulation that keep about
  # one CPU busy) runs beside the full build's other tests, as a second meson test with its own
  # log, instead of alone after them (docs/testing.md). With arguments, one meson test runs
  # what they select.
  guest_pid=
  if [ $variant = full ] && [ $# -eq 0 ] && meson test -C "$dir" --no-rebuild --list --suite ib 2>/dev/null | grep -q ib_guest; then
    guest_start=$SECONDS
    run_tests "$dir" "ib guest tests" ib-testlog --suite ib >"$dir/ib-tests.log" 2>&1 &
    guest_pid=$!
    echo "== ib guest tests: started beside the other full tests (output: $dir/ib-tests.log)"
    test_args=(--no-suite ib)
  else
    test_args=("$@")
  fi
  # Two at a time; tests that start rank processes are is_parallel: false and run alone
  # (tests/meson.build).
  if ! run_tests "$dir" "$variant tests" testlog --num-processes 2 "${test_args[@]}"; then
    status=1
  fi
  reports+=("$dir/testlog-times.txt")
  if [ -n "$guest_pid" ]; then
    guest_status=0
    wait "$guest_pid" || guest_status=$?
    cat "$dir/ib-tests.log"
    reports+=("$dir/ib-testlog-times.txt")
    [ $guest_status -eq 0 ] || status=1
    echo "== ib guest tests: $((SECONDS - guest_start)) s, beside the other full tests"
  fi
  end_phase "$variant tests" "$dir/meson-logs/testlog.txt${guest_pid:+, ib-testlog.txt (beside)}"
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
      run_tests "$dir" "asan tests" testlog lifetime async_lifetime_asan device_staging transport_shared_cpu_path; then
    status=1
  fi
  reports+=("$dir/testlog-times.txt")
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
