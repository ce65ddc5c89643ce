#!/bin/bash
# scripts/rdma_guest/guest_main.sh RUN_DIR - stage 2 inside the guest, run by the host's bash in
# the guest's root (the host's files, read-only, under a tmpfs overlay). Mounts the writable
# shares, brings up two Soft-RoCE devices on a veth pair, then runs RUN_DIR/job.sh (written by
# scripts/rdma_guest.sh: the caller's environment, directory and command) with its stdout and
# stderr on the virtio ports the host relays, and reports its exit status on a third port.
#
# The devices (documented in docs/ib_guest.md):
#   rxe0 on veth0, 10.99.0.1/24      rxe1 on veth1, 10.99.0.2/24
# GID index 1 of each is its RoCE v2 IPv4-mapped GID.
set -uo pipefail
run=$1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

mark() {  # a timed line on the guest's console (BRAID_GUEST_VERBOSE=1 shows it)
  local up _
  read -r up _ < /proc/uptime
  echo "[$up] rdma_guest stage 2: $*" > /dev/console
}
mark started

port() {  # the device of the virtio port the host named $1
  local p name
  for p in /sys/class/virtio-ports/*; do
    read -r name < "$p/name" 2>/dev/null && [ "$name" = "$1" ] && { echo "/dev/${p##*/}"; return 0; }
  done
  return 1
}
out=$(port braid.out) && err=$(port braid.err) && status=$(port braid.status) || {
  echo "rdma_guest stage 2: the host's virtio ports are missing" >&2; exit 1; }
exec 3>"$status" 2>"$err"

setup_failed() {
  echo "rdma_guest: guest setup failed: $*" >&2
  echo "setup-failed" >&3
  exit 1
}

# Writable shares: the caller's directory and BRAID_GUEST_SHARE, each a 9p export of its own,
# mounted over the read-only view at the same path (tag<TAB>path lines from the host).
while IFS=$'\t' read -r tag path; do
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=mmap "$tag" "$path" ||
    setup_failed "mounting $path (9p tag $tag) read-write"
done < "$run/shares"

mark "shares mounted"
echo rdma-guest > /proc/sys/kernel/hostname
echo "127.0.1.1 rdma-guest" >> /etc/hosts

# Two devices, one per "host": each end of the pair carries its own address, and rxe binds to it.
# One ip process for all of it (each program started here is read over 9p under emulation).
ip -batch - <<EOF || setup_failed "creating the veth pair (ip -batch)"
link set lo up
link add veth0 type veth peer name veth1
addr add 10.99.0.1/24 dev veth0
addr add 10.99.0.2/24 dev veth1
link set veth0 up
link set veth1 up
EOF
# Both addresses are local, so a packet from rxe0 to rxe1 arrives on veth1 from a local source:
# without accept_local (and with reverse-path filtering) the kernel drops it as a martian and
# every RC connection between the two devices stalls.
for conf in all default veth0 veth1; do
  echo 1 > /proc/sys/net/ipv4/conf/$conf/accept_local
  echo 0 > /proc/sys/net/ipv4/conf/$conf/rp_filter
done
mark "veth pair up"
rdma link add rxe0 type rxe netdev veth0 || setup_failed "rdma link add rxe0 type rxe netdev veth0"
rdma link add rxe1 type rxe netdev veth1 || setup_failed "rdma link add rxe1 type rxe netdev veth1"

mark "rxe devices added"
# Bounded wait (10 s) for both ports to be ACTIVE with their IPv4 GID in place.
for dev in rxe0 rxe1; do
  sys=/sys/class/infiniband/$dev/ports/1
  state=missing
  for ((i = 0; i < 100; i++)); do
    read -r state < "$sys/state" && read -r gid_type < "$sys/gid_attrs/types/1" &&
      [[ $state == *ACTIVE* && $gid_type == "RoCE v2" ]] && break
    sleep 0.1
  done 2>/dev/null
  [ "$i" -lt 100 ] || setup_failed "$dev port 1 is not ACTIVE with a RoCE v2 GID at index 1 after 10 s (state: $state)"
done

# Registering memory pins it: let the command lock all it wants (the kernel's default is 8 MiB).
# A test of a low limit runs under tests/ib/low_memlock.sh (root ignores the limit otherwise).
ulimit -l unlimited

read -r up _ < /proc/uptime
echo "ready $up" >&3
mark "ready"
# A port opens once at a time: the job inherits stderr rather than opening it again.
bash "$run/job.sh" </dev/null >"$out" 3>&-
echo "exit $?" >&3
