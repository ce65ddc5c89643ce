#!/usr/bin/env bash
# Installs the build into a scratch root, then checks what a user gets: every public header
# compiles on its own with nothing but the installed include directory, and a program builds
# with `c++ -std=c++20 prog.cc $(pkg-config --cflags --libs braid)` and runs as one rank (with
# the `torch` feature, a libtorch program with braid-torch.pc too).
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
# Each .pc names each library once (pkg.generate used to repeat every layer's dependencies:
# cudart eight times), describes braid, and has no placeholder URL.
for f in "$pc"/braid*.pc; do
  dups=$(grep -E '^(Libs|Libs\.private|Requires|Requires\.private):' "$f" | cut -d: -f2- | tr ' ,' '\n\n' |
         grep -v '^$' | sort | uniq -d)
  [ -z "$dups" ] || { echo "$(basename "$f") names more than once: $dups"; cat "$f"; exit 1; }
  grep -qE '^Description: .{20,}' "$f" || { echo "$(basename "$f") has no real Description"; cat "$f"; exit 1; }
  if grep -q '^URL: .*\.invalid' "$f"; then echo "$(basename "$f") has a placeholder URL"; exit 1; fi
done
static=$(pkg-config --libs --static braid)
echo "pkg-config --static: $static"
for lib in -lbraid cudart; do
  n=$(tr ' ' '\n' <<<"$static" | grep -c -- "$lib" || true)
  [ "$n" -le 1 ] || { echo "pkg-config --libs --static braid names $lib $n times: $static"; exit 1; }
done
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
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
LD_LIBRARY_PATH=$libdir MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) RANK=0 WORLD_SIZE=1 timeout 60 "$root/prog"

# The libtorch adapter: braid/ddp/torch.h (checked alone above: it names torch only in a forward
# declaration) is installed exactly when libbraid_torch and braid-torch.pc are, with the
# `torch` feature. Then a libtorch program must build from braid-torch.pc alone and run.
torch_pc=$(find "$root" -name braid-torch.pc | head -1)
if [ -f "$inc/braid/ddp/torch.h" ] && [ -z "$torch_pc" ]; then
  echo "braid/ddp/torch.h was installed without libbraid_torch and braid-torch.pc"; exit 1
fi
if [ -n "$torch_pc" ]; then
  [ -f "$inc/braid/ddp/torch.h" ] || { echo "braid-torch.pc was installed without braid/ddp/torch.h"; exit 1; }
  # libtorch is not under the scratch root: undo the sysroot prefix should pkg-config add one.
  torch_flags=$(pkg-config --cflags --libs braid-torch | sed "s| -isystem $root/| -isystem /|")
  echo "pkg-config braid-torch: $torch_flags"
  # shellcheck disable=SC2086
  c++ -std=c++20 "$src/outside_torch_program.cc" $torch_flags -o "$root/torch_prog"
  LD_LIBRARY_PATH=$libdir MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) RANK=0 WORLD_SIZE=1 timeout 60 "$root/torch_prog"
fi
