#!/usr/bin/env bash
# tests/ib/guest_smoke.sh - inside the Soft-RoCE guest (scripts/rdma_guest.sh), checks what every
# ib test relies on: both devices ACTIVE with their RoCE v2 IPv4 GID at index 1, RC traffic
# between them (perftest's ib_write_bw and ib_write_lat complete), memory locking unlimited by
# default, and tests/ib/low_memlock.sh really making a registration fail. One line per check;
# exits 1 when any failed.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
pair=$repo/scripts/rdma_guest/perftest_pair.sh
failed=0
ok() { echo "ok - $*"; }
not_ok() { echo "not ok - $*"; failed=1; }

for dev in rxe0:10.99.0.1 rxe1:10.99.0.2; do
  name=${dev%%:*} addr=${dev#*:}
  info=$(ibv_devinfo -v -d "$name" 2>&1)
  if grep -q 'state:.*PORT_ACTIVE' <<< "$info"; then ok "$name port 1 ACTIVE"
  else not_ok "$name port 1 not ACTIVE: $(grep -m1 'state:' <<< "$info" || echo "$info" | head -n 1)"; fi
  if grep -Eq "GID\[ *1\]:[[:space:]]+::ffff:$addr, RoCE v2" <<< "$info"; then ok "$name GID index 1 is ::ffff:$addr, RoCE v2"
  else not_ok "$name GID index 1 is not ::ffff:$addr (RoCE v2): $(grep 'GID\[' <<< "$info" | tr -s '\t ' ' ')"; fi
done

# A results row (the size first) in the client's output means the transfer completed.
if out=$("$pair" ib_write_bw 18515 -s 4194304 -n 20 --report_gbits -F) &&
   row=$(grep -E '^ *4194304 +20 ' <<< "$out"); then
  ok "ib_write_bw 4 MiB rxe0 -> rxe1:$(awk '{ print " " $4 " Gbit/s average" }' <<< "$row")"
else
  not_ok "ib_write_bw 4 MiB rxe0 -> rxe1 did not complete"
  echo "$out" | sed 's/^/  /'
fi
if out=$("$pair" ib_write_lat 18516 -s 8 -n 1000 -F) && row=$(grep -E '^ *8 +1000 ' <<< "$out"); then
  ok "ib_write_lat 8 B rxe0 <-> rxe1:$(awk '{ print " " $5 " us typical" }' <<< "$row")"
else
  not_ok "ib_write_lat 8 B rxe0 <-> rxe1 did not complete"
  echo "$out" | sed 's/^/  /'
fi

limit=$(ulimit -l)
if [ "$limit" = unlimited ]; then ok "ulimit -l is unlimited"; else not_ok "ulimit -l is $limit, not unlimited"; fi
low=$("$repo/tests/ib/low_memlock.sh" 64 sh -c 'ulimit -l; grep CapBnd /proc/self/status' 2>&1)
if grep -qx 64 <<< "$low" && grep -q 'CapBnd:' <<< "$low" &&
   (( (0x$(awk '/CapBnd/ { print $2 }' <<< "$low") >> 14 & 1) == 0 )); then
  ok "low_memlock.sh 64: ulimit -l 64 without CAP_IPC_LOCK"
else
  not_ok "low_memlock.sh 64 did not set the limit or drop CAP_IPC_LOCK: $low"
fi
# 4 MiB cannot be pinned under 64 KiB: the run must fail, and fail at registration.
if out=$(PERFTEST_WRAP="$repo/tests/ib/low_memlock.sh 64" PERFTEST_TIMEOUT_S=60 \
         "$pair" ib_write_bw 18517 -s 4194304 -n 5 -F 2>&1); then
  not_ok "ib_write_bw registered 4 MiB under ulimit -l 64 KiB"
elif grep -qi 'MR' <<< "$out"; then
  ok "under low_memlock.sh 64, registering 4 MiB fails: $(grep -i -m1 'MR' <<< "$out" | sed 's/^ *//')"
else
  not_ok "under low_memlock.sh 64, ib_write_bw failed, but not at registration:"
  echo "$out" | sed 's/^/  /'
fi
exit $failed
