#!/usr/bin/env bash
# scripts/pack_build_deps.sh - copy this machine's libsodium, GoogleTest/GoogleMock and Google
# Benchmark (Debian's packages) into one folder, for a machine that has a compiler, meson, ninja
# and CUDA but not these packages and no way to install them (a GPU machine with no network):
# carry the folder there, source its env.sh, then run scripts/gpu_check.sh.
#
#   scripts/pack_build_deps.sh [DIR]        # DIR defaults to .build-deps (git ignores it)
#   . DIR/env.sh                             # on the other machine, from the repository root
#
# The .pc files name their folder relative to themselves, so the folder works wherever it lands.
# pkgconf travels too, in case the other machine has no pkg-config. GoogleTest's sources travel
# as well: env.sh's braid_build_gtest builds them there when the copied static libraries do not
# link (an older libstdc++).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.build-deps}
multiarch=$(gcc -print-multiarch)
lib=/usr/lib/$multiarch
for f in "$lib/libsodium.so" "$lib/libgtest.a" "$lib/libgmock.a" "$lib/libbenchmark.so" /usr/bin/pkgconf; do
  [[ -e $f ]] || { echo "pack_build_deps: $f missing: run scripts/setup.sh first" >&2; exit 1; }
done
rm -rf "$dir"
mkdir -p "$dir"/{include,lib/pkgconfig,bin,src}
cp -a /usr/include/{sodium,sodium.h,gtest,gmock,benchmark} "$dir/include/"
cp -a "$lib"/libsodium.so* "$lib"/libgtest*.a "$lib"/libgmock*.a "$lib"/libbenchmark*.so* \
  "$lib"/libbenchmark_main.a "$dir/lib/"
cp -a /usr/bin/pkgconf "$lib"/libpkgconf.so.3* "$dir/bin/"
cp -a /usr/src/googletest "$dir/src/"
for pc in gtest gtest_main gmock gmock_main benchmark libsodium; do
  sed -e 's|^prefix=.*|prefix=${pcfiledir}/../..|' \
      -e 's|^libdir=.*|libdir=${pcfiledir}/..|' \
      -e 's|^includedir=.*|includedir=${pcfiledir}/../../include|' \
      "$lib/pkgconfig/$pc.pc" >"$dir/lib/pkgconfig/$pc.pc"
done
cat >"$dir/env.sh" <<'EOF'
# Sourced from the repository root: points meson and the loader at this folder.
braid_deps=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PKG_CONFIG_PATH=$braid_deps/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$braid_deps/lib:$braid_deps/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v pkg-config >/dev/null || export PKG_CONFIG=$braid_deps/bin/pkgconf
# Rebuilds GoogleTest/GoogleMock from source into this folder (needs cmake).
braid_build_gtest() {
  cmake -S "$braid_deps/src/googletest" -B "$braid_deps/gtest-build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON >/dev/null &&
    cmake --build "$braid_deps/gtest-build" -j >/dev/null &&
    cp "$braid_deps"/gtest-build/lib/*.a "$braid_deps/lib/"
}
EOF
grep -qx "/$dir/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo "/$dir/" >>.git/info/exclude; }
echo "pack_build_deps: $dir ($(du -sh "$dir" | cut -f1)); on the other machine: . $dir/env.sh"
