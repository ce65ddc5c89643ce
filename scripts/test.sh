#!/usr/bin/env bash
# Builds braid twice with warnings as errors - once with every optional feature this machine
# has (io_uring, verbs, CUDA), once with all of them disabled - and runs every test in both;
# then a third time with AddressSanitizer, for the communicator lifetime tests, device staging
# and the shared-CPU path. At the end it prints how long each phase took (set-up, each build,
# each test run) and, per test run, each suite's time and the slowest tests (docs/testing.md).
# Usage: scripts/test.sh [extra meson test args, e.g. --suite store]
#
# Most tests wait (for timeouts, peers, rank processes) far more than they compute, so after the
# full build three streams run at once (docs/testing.md, "Why it takes the time it does"):
#   guest:  the full build's ib suite (the Soft-RoCE guest, about one CPU of emulation);
#   full:   the full build's other tests;
#   others: the minimal and ASan builds at a lower CPU priority (nice), each build's tests
#           as soon as it is built.
# Inside each test run, tests that start rank processes still run one at a time. With arguments
# everything runs in turn: both builds, then one test run each with the arguments, no ASan.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/build_progress.sh

# Phases and their times, printed at the end whatever happened (a failed build included). The
# streams run in subshells, so each phase is a line in a file: start, length, name, note.
phase_log=$(mktemp)
reports=()
begin_phase() { phase_start=$SECONDS; }
end_phase() {  # NAME NOTE
  printf '%s\t%s\t%s\t%s\n' "$phase_start" "$((SECONDS - phase_start))" "$1" "${2:-}" >>"$phase_log"
}
stream_pids=()
print_phases() {
  local rc=$? start secs name note
  for p in "${stream_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for r in "${reports[@]}"; do [ -f "$r" ] && cat "$r"; done
  echo "== time per phase (from the start; phases of different streams overlap)"
  while IFS=$'\t' read -r start secs name note; do
    printf '   %-16s at %5ss %5ss  %s\n' "$name" "$start" "$secs" "$note"
  done < <(sort -n "$phase_log")
  printf '   %-16s          %5ss  (%s)\n' "total" "$SECONDS" "$(elapsed_since 0)"
  rm -f "$phase_log"
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

full_options=(-Dwerror=true -Dliburing=auto -Dibverbs=auto -Dcuda=auto -Dtorch=auto)
minimal_options=(-Dwerror=true -Dliburing=disabled -Dibverbs=disabled -Dcuda=disabled -Dtorch=disabled)
# -O1 -g1 (after the build type's -O2 -g): what AddressSanitizer recommends for speed, and line
# tables are all its reports need; both compile faster than -O2 -g (docs/testing.md).
asan_options=(-Dwerror=true -Db_sanitize=address -Db_lundef=false -Dbuildtype=debugoptimized
              "-Dcpp_args=['-O1','-g1']" -Dliburing=enabled -Dibverbs=disabled -Dcuda=disabled -Dtorch=disabled
              -Dbenchmarks=false)
# Only what the ASan tests run is built in that variant.
asan_targets=(tests/runtime/async/lifetime_test tests/runtime/async/async_lifetime_asan_test
              tests/runtime/async/async_rank tests/runtime/device/device_staging_test
              tests/transport/shared_cpu_path_test)

# Configures and builds VARIANT in build-ci-VARIANT; NICE (optional) lowers its CPU priority.
build_variant() {  # VARIANT [NICE]
  local variant=$1 nice=${2:-0} dir=build-ci-$1 options
  begin_phase
  case $variant in
    full) options=("${full_options[@]}") ;;
    minimal) options=("${minimal_options[@]}") ;;
    asan) options=("${asan_options[@]}") ;;
  esac
  (
    [ "$nice" -eq 0 ] || renice -n "$nice" -p "$BASHPID" >/dev/null
    configure "$dir" "${options[@]}" || exit 1
    echo "== $variant build: $(describe_build "$dir")"
    if [ "$variant" = asan ]; then
      echo "== asan build: lifetime tests (io_uring, epoll, inproc), device-buffer staging (fake device), shared-CPU path"
      build_with_progress "asan build" -C "$dir" "${asan_targets[@]}"
    else
      build_with_progress "$variant build" -C "$dir"
    fi
  ) || { end_phase "$variant build" "FAILED"; return 1; }
  end_phase "$variant build" "$([ "$nice" -eq 0 ] || echo "nice $nice; ")$(describe_build "$dir")"
}
describe_build() {
  meson introspect "$1" --buildoptions | python3 -c '
import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print(", ".join(f"{k}={opts[k]}" for k in ("liburing", "ibverbs", "cuda", "torch", "werror", "b_sanitize")))'
}

# Runs meson test in DIR, its logs named LOGBASE (meson-logs/LOGBASE.{txt,json}), and writes a
# per-suite report of its times to DIR/LOGBASE-times.txt, which the end prints.
run_tests() {  # DIR LABEL LOGBASE MESON_TEST_ARGS...
  local dir=$1 label=$2 logbase=$3 rc=0; shift 3
  begin_phase
  rm -f "$dir/meson-logs/$logbase.json" "$dir/$logbase-times.txt"
  meson test -C "$dir" --no-rebuild --print-errorlogs --logbase "$logbase" "$@" || rc=1
  if [ -f "$dir/meson-logs/$logbase.json" ]; then
    python3 scripts/test_times.py "$dir/meson-logs/$logbase.json" "$label" >"$dir/$logbase-times.txt" || true
  fi
  end_phase "$label" "$dir/meson-logs/$logbase.txt$([ $rc -eq 0 ] || echo ', FAILED')"
  return $rc
}

# A third build with AddressSanitizer, for what /proc/self/fd counts cannot see: a communicator
# destroyed after a clean end, an abort or a failed peer must leave no leaked object and touch
# nothing it freed (valgrind cannot follow io_uring's kernel-side writes, ASan does not need to).
# Only the lifetime cases are built and run (in-process on io_uring, epoll and inproc; across
# rank processes for abort, destroy and a SIGKILLed peer). Rank processes write their reports
# to files (log_path), so a report from a child whose exit code a test does not check still
# fails the run.
run_asan_tests() {
  local dir=build-ci-asan rc=0 f
  local asan_logs=$PWD/$dir/asan-reports
  rm -rf "$asan_logs" && mkdir -p "$asan_logs"
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:log_path=$asan_logs/report \
    run_tests "$dir" "asan tests" testlog lifetime async_lifetime_asan device_staging transport_shared_cpu_path || rc=1
  if compgen -G "$asan_logs/report*" >/dev/null; then
    for f in "$asan_logs"/report*; do echo "== AddressSanitizer report $f"; cat "$f"; done
    rc=1
  fi
  return $rc
}

status=0
if [ $# -gt 0 ]; then
  for variant in full minimal; do
    build_variant $variant || { status=1; continue; }
    # Two at a time; tests that start rank processes are is_parallel: false and run alone.
    run_tests build-ci-$variant "$variant tests" testlog --num-processes 2 "$@" || status=1
    reports+=("build-ci-$variant/testlog-times.txt")
  done
  exit $status
fi

build_variant full || exit 1
# Lock contracts (GUARDED_BY, REQUIRES on braid::Mutex) checked by clang over the units that use
# them, with the build's flags; and runtime/'s shape (no function over 80 lines, no class over 25
# data members). Seconds, no objects written.
begin_phase
shape_rc=0
python3 scripts/thread_safety.py build-ci-full || shape_rc=1
python3 scripts/code_shape.py runtime || shape_rc=1
end_phase "lock contracts, shape" "scripts/thread_safety.py, scripts/code_shape.py$([ $shape_rc -eq 0 ] || echo ', FAILED')"
[ $shape_rc -eq 0 ] || status=1
mkdir -p build-ci-logs  # the output of the streams that run beside, shown when they end
rm -f build-ci-logs/*.log build-ci-*/*testlog-times.txt  # nothing of an earlier run is shown
reports+=(build-ci-full/testlog-times.txt build-ci-full/ib-testlog-times.txt
          build-ci-minimal/testlog-times.txt build-ci-asan/testlog-times.txt)

# Stream "guest": the ib suite, one test (tests/ib/meson.build), where the build has it.
if meson test -C build-ci-full --no-rebuild --list --suite ib 2>/dev/null | grep -q ib_guest; then
  run_tests build-ci-full "ib guest tests" ib-testlog --suite ib >build-ci-logs/ib-tests.log 2>&1 &
  stream_pids+=($!)
  echo "== ib guest tests: started beside the other tests (output: build-ci-logs/ib-tests.log)"
fi
guest_pid=${stream_pids[0]:-}

# Stream "others": the two other builds yield the CPU to the tests running meanwhile (nice 10:
# they take what the waiting tests leave), and each build's tests run, at the normal priority,
# once it is built.
(
  rc=0 minimal_built=1
  build_variant minimal 10 || { rc=1; minimal_built=0; }
  build_variant asan 10 >build-ci-logs/asan-build.log 2>&1 &
  asan_build=$!
  # Two at a time; tests that start rank processes are is_parallel: false and run alone.
  [ $minimal_built = 0 ] || run_tests build-ci-minimal "minimal tests" testlog --num-processes 2 || rc=1
  asan_built=0
  wait $asan_build && asan_built=1
  cat build-ci-logs/asan-build.log
  if [ $asan_built = 1 ]; then
    run_asan_tests || rc=1
  else
    rc=1
  fi
  exit $rc
) >build-ci-logs/others.log 2>&1 &
others_pid=$!
stream_pids+=("$others_pid")
echo "== minimal build, asan build, then their tests: started beside (output: build-ci-logs/others.log)"

# Stream "full", here: every other test of the full build, two at a time where they may be.
run_tests build-ci-full "full tests" testlog --num-processes 2 --no-suite ib || status=1

for pid in $guest_pid $others_pid; do
  wait "$pid" || status=1
done
stream_pids=()
for log in build-ci-logs/ib-tests.log build-ci-logs/others.log; do
  if [ -f "$log" ]; then
    echo "== $log"
    cat "$log"
  fi
done
if command -v ccache >/dev/null; then
  echo "== ccache: $(ccache --show-stats 2>/dev/null | grep -iE 'hits|misses' | tr -s ' ' | paste -sd';' -)"
fi
exit $status
