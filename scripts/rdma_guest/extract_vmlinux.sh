#!/usr/bin/env bash
# scripts/rdma_guest/extract_vmlinux.sh BZIMAGE > vmlinux - the uncompressed ELF kernel inside a
# bzImage whose payload is xz (Debian's amd64 kernels: CONFIG_KERNEL_XZ). The payload starts at
# an xz stream header somewhere after the setup code; the header's bytes may also occur by
# chance earlier, so each candidate is tried until one decompresses to an ELF file.
set -euo pipefail
image=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for offset in $(LC_ALL=C grep -abo $'\xfd7zXZ' "$image" | cut -d: -f1); do
  # xz stops at the stream's end, so tail may die of SIGPIPE: only xz's status counts.
  if (set +o pipefail; tail -c +$((offset + 1)) "$image" | xz -dc --single-stream > "$out" 2>/dev/null) &&
     [ "$(head -c 4 "$out" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
    cat "$out"
    exit 0
  fi
done
exit 1
