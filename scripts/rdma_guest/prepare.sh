#!/usr/bin/env bash
# scripts/rdma_guest/prepare.sh - the one-time half of scripts/rdma_guest.sh: fetches Debian's
# kernel package (apt-get download, never installed), unpacks it, takes the uncompressed vmlinux
# out of the bzImage (the kernel has a PVH entry, so qemu boots the ELF directly and skips
# decompressing under emulation), runs depmod once, and packs a busybox initramfs with the
# modules the guest needs. Everything is cached outside the clone, keyed by the kernel's ABI
# name and the initramfs's inputs, so a clean clone (CI) reuses it.
# Prints two lines on stdout: the kernel image and the initramfs. Progress goes to stderr.
# Exits 77 with one line when the guest cannot be had (no network for the first download, ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

say() { echo "rdma_guest: $*" >&2; }
skip() { say "cannot prepare the guest: $*"; exit 77; }

# The modules the guest loads, in an order where each one's dependencies come first (depmod's
# answer below); crc32_generic first because rdma_rxe asks the crypto API for "crc32" at run
# time, and an initramfs has no module helper to load it on demand.
wanted_modules=(crc32_generic virtio_pci virtio_console 9pnet_virtio 9p overlay veth
                rdma_rxe ib_uverbs rdma_ucm)

cache=${BRAID_GUEST_CACHE:-/var/cache/braid/rdma-guest}
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/braid/rdma-guest
  mkdir -p "$cache" || skip "no writable cache directory (set BRAID_GUEST_CACHE)"
fi

# The kernel linux-image-amd64 depends on today; offline, the newest one already cached.
pkg=${BRAID_GUEST_KERNEL_PKG:-}
if [ -z "$pkg" ]; then
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }') || true
fi
cached=$(find "$cache" -mindepth 2 -maxdepth 2 -name vmlinux -printf '%h\n' | sort -V | tail -n 1)
if [ -z "$pkg" ]; then
  [ -n "$cached" ] || skip "apt-cache does not know linux-image-amd64 (not Debian, or no package lists) and nothing is cached in $cache"
  pkg=linux-image-${cached##*/}
fi
kver=${pkg#linux-image-}
dir=$cache/$kver

# Two preparations at once (parallel CI jobs, two shells) would unpack over each other.
exec 9>"$cache/.lock"
flock -w 900 9 || skip "another preparation has held $cache/.lock for 15 minutes"

if [ ! -f "$dir/vmlinux" ]; then
  tmp=$(mktemp -d "$cache/.unpack.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  say "downloading $pkg (once; cached in $dir)"
  if ! (cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>"$tmp/apt.log"); then
    why="apt-get download $pkg failed ($(grep -m1 -E '^(E|W):' "$tmp/apt.log" || tail -n 1 "$tmp/apt.log"))"
    [ -n "$cached" ] && [ -z "${BRAID_GUEST_KERNEL_PKG:-}" ] ||
      skip "$why; the first run needs the Debian mirror"
    # The package lists name a newer kernel than the mirror can give now: keep the cached one.
    say "$why; using the cached ${cached##*/}"
    kver=${cached##*/} dir=$cached
    rm -rf "$tmp"
    trap - EXIT
  fi
fi
if [ ! -f "$dir/vmlinux" ]; then
  say "unpacking $pkg"
  dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/root"
  rm -f "$tmp"/*.deb
  say "taking vmlinux out of vmlinuz-$kver"
  "$here/extract_vmlinux.sh" "$tmp/root/boot/vmlinuz-$kver" > "$tmp/vmlinux" ||
    skip "no xz-compressed vmlinux found in vmlinuz-$kver"
  say "depmod $kver"
  depmod -b "$tmp/root" "$kver"
  rm -rf "$dir"
  mkdir -p "$dir"
  mv "$tmp/root" "$dir/root"
  mv "$tmp/vmlinux" "$dir/vmlinux"   # last: its presence means the rest is complete
  rm -rf "$tmp"
  trap - EXIT
  # Each kernel takes about 400 MB unpacked: keep only the one in use (a guest still running
  # an older one has its files open already).
  for old in "$cache"/*/vmlinux; do
    [ "$old" = "$dir/vmlinux" ] || rm -rf "$(dirname "$old")"
  done
fi

# The load order, as insmod lines, from the unpacked tree's module database.
order=$(for m in "${wanted_modules[@]}"; do
          modprobe -d "$dir/root" -S "$kver" --show-depends "$m" || exit 1
        done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }') ||
  skip "modprobe cannot resolve the guest's modules in $dir/root"
busybox=$(command -v busybox) || skip "busybox not found (apt-get install busybox-static)"
key=$( { cat "$here/init" "$busybox"; echo "$order"; } | sha256sum | cut -c1-16)
initramfs=$dir/initramfs-$key.cpio

if [ ! -f "$initramfs" ]; then
  say "building the guest's initramfs ($(echo "$order" | wc -l) modules, busybox)"
  stage=$(mktemp -d "$cache/.initramfs.XXXXXX")
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage"/{bin,dev,proc,sys,lower,rw,newroot,lib/modules}
  cp "$busybox" "$stage/bin/busybox"
  cp "$here/init" "$stage/init"
  chmod 755 "$stage/init"
  while read -r ko; do
    cp "$ko" "$stage/lib/modules/"
    basename "$ko" >> "$stage/lib/modules/order"
  done <<< "$order"
  # Uncompressed: unpacking costs less under emulation than decompressing would.
  (cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$initramfs.tmp"
  mv "$initramfs.tmp" "$initramfs"
  rm -rf "$stage"
  trap - EXIT
  # Older initramfs builds of this kernel are no longer used.
  find "$dir" -maxdepth 1 -name 'initramfs-*.cpio' ! -name "$(basename "$initramfs")" -delete
fi

echo "$dir/vmlinux"
echo "$initramfs"
