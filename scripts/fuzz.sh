#!/usr/bin/env bash
# Builds braid's libFuzzer targets with clang (AddressSanitizer + UndefinedBehaviorSanitizer) and
# runs each for a while. Every parser of bytes from the network has one: the store's handshake and
# frames, the tcp transport's handshake and frames, the operation header and the settings card,
# and what an etcd member sends braidrun back.
# The same fuzz_* functions run with bounded random and mutated inputs inside the normal test
# suites (scripts/test.sh); this script is for the longer runs.
# Usage: scripts/fuzz.sh [seconds per target, default 60] [target name ...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
need=()
for p in clang libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "fuzz: installing ${need[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
seconds=${1:-60}
shift || true
dir=build-fuzz
if [ ! -f "$dir/build.ninja" ]; then
  CXX=clang++ CC=clang meson setup "$dir" -Dfuzzers=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dbuildtype=debugoptimized -Dtests=false -Dbenchmarks=false -Dliburing=enabled -Dibverbs=disabled \
    -Dcuda=disabled -Dtorch=disabled >/dev/null
fi
echo "== building the fuzzers ($dir)"
ninja -C "$dir" fuzzers
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd "$dir/tests/fuzz" && ls -1 *_fuzzer)
fi
status=0
for t in "${targets[@]}"; do
  corpus=$dir/corpus/$t
  mkdir -p "$corpus"
  echo "== $t: $seconds s (corpus $corpus)"
  if ! "$dir/tests/fuzz/$t" -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 \
      "$corpus" 2>"$dir/$t.log"; then
    echo "== $t FAILED: see $dir/$t.log and the crash-* file it names"; tail -30 "$dir/$t.log"; status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$dir/$t.log" | tail -2
  fi
done
exit $status
