#!/usr/bin/env bash
# Builds braid twice with warnings as errors - once with every optional feature this machine
# has (io_uring, verbs, CUDA), once with all of them disabled - and runs every test in both.
# Usage: scripts/test.sh [extra meson test args, e.g. --suite store]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

configure() {
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}

status=0
for variant in full minimal; do
  dir=build-ci-$variant
  if [ $variant = full ]; then
    configure "$dir" -Dwerror=true -Dliburing=auto -Dibverbs=auto -Dcuda=auto
  else
    configure "$dir" -Dwerror=true -Dliburing=disabled -Dibverbs=disabled -Dcuda=disabled
  fi
  echo "== $variant build: $(meson introspect "$dir" --buildoptions | python3 -c '
import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print(", ".join(f"{k}={opts[k]}" for k in ("liburing", "ibverbs", "cuda", "werror")))')"
  ninja -C "$dir" >/dev/null
  if ! meson test -C "$dir" --no-rebuild --print-errorlogs --num-processes 2 "$@"; then
    status=1
  fi
done
exit $status
