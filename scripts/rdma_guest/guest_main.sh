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

port() {  # the device of the virtio port the host named $1
  local p
  for p in /sys/class/virtio-ports/*; do
    [ "$(cat "$p/name" 2>/dev/null)" = "$1" ] && { echo "/dev/${p##*/}"; return 0; }
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

hostname rdma-guest
echo "127.0.1.1 rdma-guest" >> /etc/hosts
ip link set lo up

# Two devices, one per "host": each end of the pair carries its own address, and rxe binds to it.
ip link add veth0 type veth peer name veth1 || setup_failed "ip link add veth0 type veth"
ip addr add 10.99.0.1/24 dev veth0
ip addr add 10.99.0.2/24 dev veth1
ip link set veth0 up
ip link set veth1 up
# Both addresses are local, so a packet from rxe0 to rxe1 arrives on veth1 from a local source:
# without accept_local (and with reverse-path filtering) the kernel drops it as a martian and
# every RC connection between the two devices stalls.
for conf in all default veth0 veth1; do
  echo 1 > /proc/sys/net/ipv4/conf/$conf/accept_local
  echo 0 > /proc/sys/net/ipv4/conf/$conf/rp_filter
done
rdma link add rxe0 type rxe netdev veth0 || setup_failed "rdma link add rxe0 type rxe netdev veth0"
rdma link add rxe1 type rxe netdev veth1 || setup_failed "rdma link add rxe1 type rxe netdev veth1"

# Bounded wait for both ports to be ACTIVE with their IPv4 GID in place.
for dev in rxe0 rxe1; do
  sys=/sys/class/infiniband/$dev/ports/1
  for _ in $(seq 100); do
    grep -q ACTIVE "$sys/state" 2>/dev/null &&
      [ "$(cat "$sys/gid_attrs/types/1" 2>/dev/null)" = "RoCE v2" ] && break
    sleep 0.1
  done
  grep -q ACTIVE "$sys/state" 2>/dev/null ||
    setup_failed "$dev port 1 is not ACTIVE after 10 s ($(cat "$sys/state" 2>/dev/null))"
done

# Registering memory pins it: let the command lock all it wants (the kernel's default is 8 MiB).
# A test of a low limit sets its own: sh -c 'ulimit -l 64; exec prog'.
ulimit -l unlimited

echo "ready $(cut -d' ' -f1 /proc/uptime)" >&3
# A port opens once at a time: the job inherits stderr rather than opening it again.
bash "$run/job.sh" </dev/null >"$out" 3>&-
echo "exit $?" >&3
