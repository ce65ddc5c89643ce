#!/usr/bin/env bash
# Installs the Debian packages braid's build, tests and benchmarks need - only those missing,
# and silently when none is. Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail

packages=(
  g++ meson ninja-build pkg-config ccache   # build (ccache: the second build of scripts/test.sh reuses the first)
  libsodium-dev                             # the job secret's MAC (required)
  liburing-dev libibverbs-dev               # optional features (io_uring engine, verbs)
  libgtest-dev libgmock-dev libbenchmark-dev  # tests and benchmarks
  iproute2 iperf3 procps psmisc             # network namespaces, link checks, process checks
  valgrind                                  # the memcheck test of every operation
  iptables                                  # packet loss in the fault soak where tc netem is missing
  zlib1g-dev dataset-fashion-mnist          # the DDP training example and its data
  libtorch-dev                              # the libtorch DDP adapter and its example (torch feature)
  python3-matplotlib                        # braid-plot (busbw and time against size)
  qemu-system-x86 busybox-static kmod cpio xz-utils  # the Soft-RoCE guest (scripts/rdma_guest.sh)
  rdma-core ibverbs-utils ibverbs-providers perftest  # verbs tools and rxe provider in that guest
  python3-dev pybind11-dev python3-numpy python3-pytest  # import braid (python/) and its tests
  python3-torch                             # the torch.distributed backend "braid" and its tests
  etcd-server                               # braidrun --rdzv-backend etcd and its tests (a 3-member cluster)
)
if [ "${BRAID_SETUP_ANCHORS:-0}" = 1 ]; then   # the Gloo/Open MPI side-by-side benchmarks
  packages+=(libgloo-dev openmpi-bin libopenmpi-dev hwloc-nox)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive

# shellcheck source=scripts/package_lock.sh
. "$(dirname "$0")/package_lock.sh"
# apt's own wait covers a lock taken between our check and its start.
apt_get() {
  wait_for_package_lock || exit 1
  $sudo apt-get -o DPkg::Lock::Timeout="$lock_timeout_s" "$@"
}
apt_get update -qq >/dev/null
apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
