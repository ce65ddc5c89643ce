#!/usr/bin/env bash
# Installs the build into a scratch root, then checks what a user gets: every public header
# compiles on its own with nothing but the installed include directory, and a program builds
# with `c++ -std=c++20 prog.cc $(pkg-config --cflags --libs braid)` and runs as one rank.
set -euo pipefail
build=$1 src=$2
root=$(mktemp -d /tmp/braid-install-XXXXXX)
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --no-rebuild --destdir "$root" >/dev/null
pc=$(dirname "$(find "$root" -name braid.pc | head -1)")
[ -n "$pc" ] || { echo "braid.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH=$pc PKG_CONFIG_SYSROOT_DIR=$root
flags=$(pkg-config --cflags --libs braid)
echo "pkg-config: $flags"
inc=$(pkg-config --cflags-only-I braid | sed 's/^-I//; s/ .*//')
while IFS= read -r h; do
  name=${h#"$inc"/}
  echo "#include <$name>" | c++ -std=c++20 -fsyntax-only -I"$inc" -x c++ - ||
    { echo "installed header $name does not compile on its own"; exit 1; }
  # Only the standard library and other installed braid headers may be included.
  if grep -E '^#include' "$h" | grep -vE '^#include (<[a-z_]+>|"braid/[a-z_/]+\.h")'; then
    echo "installed header $name includes something that is not installed"; exit 1
  fi
done < <(find "$inc/braid" -name '*.h')
# shellcheck disable=SC2086
c++ -std=c++20 "$src/outside_program.cc" $flags -o "$root/prog"
libdir=$(pkg-config --variable=libdir braid)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
LD_LIBRARY_PATH=$libdir MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 WORLD_SIZE=1 timeout 60 "$root/prog"
