#include "common/env_vars.h"

#include <algorithm>

namespace braid {
namespace {

using enum EnvKind;
constexpr int64_t kKiB = 1024, kMiB = kKiB * 1024;

// In the order docs/configuration.md shows them: transport, collectives, timeouts, diagnostics,
// tuning, security, store; then the variables users do not set.
constexpr EnvVar kVars[] = {
    {"BRAID_TRANSPORT", choice, "auto", "auto|tcp|tcp-poll|ib|shm|inproc", 0, 0,
     "Transports between ranks, in order of preference: one of these, or a comma-separated list (shm,tcp). Each "
     "peer gets the first that both ranks brought up and that reaches it (shm: only peers on the same host). auto: "
     "shm, ib, tcp, where tcp runs over io_uring, falling back to epoll where io_uring cannot be set up; tcp: io_uring "
     "or fail; tcp-poll: epoll. inproc is for tests whose ranks are threads of one process. Explicit lists must be "
     "the same on every rank."},
    {"BRAID_SHM_DISABLE", choice, "0", "0|1", 0, 0,
     "1: leave the shm transport out of BRAID_TRANSPORT's list (peers on the same host then use the next one)."},
    {"BRAID_SOCKET_IFNAME", text, "", "like NCCL_SOCKET_IFNAME: \"eth0,ib\" prefixes, \"^docker\" excludes, \"=eth0\" exact",
     0, 0, "Interfaces the transport uses. Unset: the interface that routes to MASTER_ADDR."},
    {"BRAID_NSOCKS", integer, "0", "", 0, 64,
     "Sockets per peer that a message is striped across; 0 chooses from the link speed."},
    {"BRAID_PORT_RANGE", text, "", "LO-HI with 1 <= LO <= HI <= 65535, or one port", 0, 0,
     "Ports the transport listens on. Unset: any free port."},
    {"BRAID_IB_HCA", text, "", "like NCCL_IB_HCA: \"mlx5_0:1,mlx5_1\" prefixes (:PORT optional), \"^mlx5_2\" excludes, \"=rxe0\" exact", 0, 0,
     "RDMA devices and ports the ib transport may use; of those, the first ACTIVE one (one holding the bootstrap "
     "address's GID first). Unset: all."},
    {"BRAID_GDR", choice, "auto", "0|1|auto", 0, 0,
     "GPUDirect RDMA for CUDA buffers (dma-buf registration). auto: when a probe registration succeeds; 1: required "
     "(an error where it cannot work); 0: staged through pinned host memory."},
    // The ib transport's queue pairs (docs/ib.md).
    {"BRAID_IB_GID_INDEX", integer, "", "", 0, 65535,
     "GID index the ib transport uses on RoCE. Unset: the RoCE v2 GID of the bootstrap address, else the first "
     "RoCE v2 IPv4 GID."},
    {"BRAID_IB_TIMEOUT", integer, "18", "", 1, 31,
     "Verbs ack timeout exponent: a packet is retried after 4.096 us * 2^N without an ack (as NCCL_IB_TIMEOUT)."},
    {"BRAID_IB_RETRY_CNT", integer, "7", "", 0, 7, "Retries of an unacknowledged packet before a queue pair fails."},
    {"BRAID_IB_QPS_PER_CONNECTION", integer, "1", "", 1, 64, "Queue pairs each ib connection stripes its messages across."},
    {"BRAID_IB_SL", integer, "0", "", 0, 15, "InfiniBand service level of the ib transport's queue pairs."},
    {"BRAID_IB_TC", integer, "0", "", 0, 255, "Traffic class (RoCE: DSCP and ECN bits) of the ib transport's packets."},
    {"BRAID_ALGO", choice, "auto", "auto|ring|tree|rd|chain|pairwise", 0, 0,
     "Collective algorithm (rd: recursive doubling); auto picks by operation and size. Same on every rank."},
    {"BRAID_CHUNK_BYTES", bytes, "0", "", 4 * kKiB, 64 * kMiB,
     "Pipelining segment of collectives; 0 chooses automatically. Same on every rank."},
    {"BRAID_RING_DEPTH", integer, "0", "", 0, 16,
     "Segments each hop of a ring keeps moving; 0: 1 when every rank is on a host-local address, else enough "
     "segments of BRAID_CHUNK_BYTES for 2 MiB per hop (2 to 16; fewer where the landing slots of that many would pass "
     "64 MiB). Same on every rank."},
    {"BRAID_RING_ORDER", choice, "host", "host|rank", 0, 0,
     "Order of ranks around rings and down trees. host: the ranks of one host side by side, so each host sends "
     "across the network once per step; rank: as numbered (to measure what host order saves). Same on every rank."},
    {"BRAID_TIMEOUT_S", seconds, "600", "", 0, 0, "Bound on every collective, in seconds."},
    {"BRAID_RENDEZVOUS_TIMEOUT_S", seconds, "", "", 0, 0,
     "Bound on rendezvous and on every store wait, in seconds. Unset: 300, except in a group of torch's backend "
     "\"braid\", which takes torch's timeout= as gloo does. Set (300 included), it wins over torch's timeout."},
    {"BRAID_PEER_TIMEOUT_S", seconds, "30", "", 0, 0,
     "A silent peer (no FIN, no RST) is declared lost after this many seconds."},
    {"BRAID_SHRINK_TIMEOUT_S", seconds, "5", "", 0, 0,
     "How long Communicator::shrink() waits for the other survivors of a failure to call it, in seconds. Ranks "
     "known dead are not waited for: the ones the failure named (dead or silent) and every peer whose connection "
     "ended without a closing mark (a lost host's ranks). Once every other rank has called it, the survivors go on "
     "at once. A rank that calls it later is left out (docs/fault_tolerance.md)."},
    {"BRAID_DEBUG", choice, "WARN", "WARN|INFO|TRACE", 0, 0,
     "Diagnostics on stderr (any case). INFO: the version, features and one line per communicator; TRACE: every "
     "operation."},
    {"BRAID_CALLER_PROGRESS", choice, "1", "0|1", 0, 0,
     "1: a blocking call with nothing else queued runs on the calling thread instead of waking the progress thread."},
    {"BRAID_SPIN_US", integer, "", "", 0, 100000,
     "Microseconds a waiter spins before sleeping. Unset: 50, except 0 (sleep at once) in a communicator where "
     "another rank of this host may run on one of this rank's CPUs (affinity masks meet: ranks not bound apart) "
     "and some other rank of this host is reached over another transport than shm (tcp, ib); over shm the wait "
     "itself sees a peer queued on the waiter's CPU and steps off it (docs/shm.md, Waiting). BRAID_DEBUG=INFO says "
     "which. Set (50 included), it is used as it is: docs/performance.md."},
    {"BRAID_SHM_CMA", choice, "auto", "0|1|auto", 0, 0,
     "shm: how large messages move where ptrace rules allow reading the peer's memory. auto: in one copy (cross-memory "
     "attach) when larger than the ring and (mostly) held in huge pages, the sender moving the message's 2 MiB ranges "
     "onto huge pages first (MADV_COLLAPSE, once per buffer), else through the pipelined two-copy ring; 1: in one copy "
     "from 64 KiB, whatever the pages; 0: always through the ring. process_vm_readv copies 4 KiB pages well below "
     "memcpy's speed: docs/shm.md."},
    {"BRAID_SHM_RING_BYTES", bytes, "512K", "a multiple of 4 KiB", 64 * kKiB, 1024 * kMiB,
     "shm: bytes of each direction's ring per pair of ranks (each pair takes twice this), a multiple of 4 KiB. Where "
     "the memory cannot be reserved the ring is halved down to 64 KiB, with a warning. 0 means the default."},
    {"BRAID_ZCOPY_BYTES", bytes, "1M", "", 1, 0,
     "Sends at least this large use zero-copy (MSG_ZEROCOPY / SEND_ZC); 0 never does."},
    {"BRAID_CUDA_STAGING_BYTES", bytes, "64M", "", 64 * kKiB, 0,
     "Pinned host memory each communicator stages CUDA buffers through (every collective but send/recv and the uneven "
     "forms moves in chunks of a quarter of it, whatever the message size). Same on every rank. 0 means the default."},
    {"BRAID_CUDA_REDUCE", choice, "auto", "auto|device|host", 0, 0,
     "Where reductions into CUDA buffers (all_reduce, reduce; not avg) run. device: each staged chunk is gathered from "
     "every rank into pinned memory, copied to the GPU and reduced there by CUDA kernels; host: reduced on the host "
     "in the pinned chunk, as the collective runs. auto: device with 2 ranks (the same bytes cross the network either "
     "way), host with more. Same on every rank."},
    {"BRAID_LOOPBACK_CC", text, "reno", "a TCP congestion control the kernel allows (reno, cubic, ...), or system", 0, 0,
     "Congestion control of data sockets to a peer at a loopback address; system keeps the kernel's default."},
    {"BRAID_NETWORK_CC", text, "system", "a TCP congestion control the kernel allows (reno, cubic, ...), or system", 0, 0,
     "Congestion control of data sockets to a peer at any other address; system keeps the kernel's default."},
    {"BRAID_SECRET", text, "", "at least 16 characters (e.g. from `openssl rand -hex 32`)", 0, 0,
     "The job's secret: every store and transport connection proves it knows it. Unset: unauthenticated (said "
     "once). Set at most one of BRAID_SECRET and BRAID_SECRET_FILE."},
    {"BRAID_SECRET_FILE", text, "", "a file readable by its owner only (mode 0600 or stricter)", 0, 0,
     "A file holding the job's secret; braidrun makes one per job and passes it this way."},
    {"BRAID_JOB_ID", text, "", "any name", 0, 0,
     "A name for the job, shown when another job meets this one's store. Unset: braidrun's, TORCHELASTIC_RUN_ID or "
     "SLURM_JOB_ID."},
    {"BRAID_STORE_BIND", text, "", "an address; 0.0.0.0 or :: for every interface", 0, 0,
     "Where the rendezvous store listens. Unset: the address MASTER_ADDR resolves to."},
    {"BRAID_STORE_MAX_FRAME_BYTES", bytes, "4M", "", 4 * kKiB, 64 * kMiB,
     "Largest store request (key and value); a longer one is refused before it is buffered. 0 means the default."},
    {"BRAID_STORE_MAX_CLIENTS", integer, "65536", "", 16, 1000000, "Connections the store serves at once."},
    {"BRAID_STORE_MAX_PENDING", integer, "256", "", 1, 100000,
     "Connections that have not yet proved the job's secret; past it the oldest is dropped."},

    {"BRAID_STORE_PORT", integer, "", "", 1, 65535,
     "Port of braid's rendezvous store (read by runtime/bootstrap/rendezvous.cc). Unset: MASTER_PORT, or MASTER_PORT+1 under "
     "torchrun. braidrun sets it, leaving MASTER_PORT to torch's own store."},

    {"BRAID_AGENT_STORE", choice, "", "1", 0, 0,
     "Set by braidrun: the store is braidrun's own, so no rank serves it (read by runtime/bootstrap/rendezvous.cc).",
     EnvScope::launcher},
    {"BRAID_SETUP_ANCHORS", choice, "0", "0|1", 0, 0,
     "scripts/setup.sh also installs Gloo and Open MPI for the side-by-side benchmarks.", EnvScope::tool},
    {"BRAID_PERF", text, "", "a path", 0, 0, "braid's tests: the braid-perf binary under test.", EnvScope::tool},
    {"BRAID_TEST_HAVE_IO_URING", choice, "", "0|1", 0, 0, "braid's tests: whether the build has io_uring.",
     EnvScope::tool},
    {"BRAID_GUEST_TIMEOUT_S", text, "900", "seconds", 0, 0, "scripts/rdma_guest.sh: bound on the whole guest run; past it qemu is killed (exit 124).", EnvScope::tool},
    {"BRAID_GUEST_SHARE", text, "", "colon-separated directories", 0, 0, "scripts/rdma_guest.sh: directories shared read-write with the guest, besides the working directory.", EnvScope::tool},
    {"BRAID_GUEST_MEM", text, "2G", "qemu's -m", 0, 0, "scripts/rdma_guest.sh: the guest's memory.", EnvScope::tool},
    {"BRAID_GUEST_SMP", text, "2", "qemu's -smp", 0, 0, "scripts/rdma_guest.sh: the guest's CPUs.", EnvScope::tool},
    {"BRAID_GUEST_ACCEL", text, "tcg", "tcg|kvm", 0, 0, "scripts/rdma_guest.sh: qemu's accelerator.", EnvScope::tool},
    {"BRAID_GUEST_CPU", text, "", "qemu's -cpu", 0, 0, "scripts/rdma_guest.sh: the guest's CPU model (max under tcg, host under kvm).", EnvScope::tool},
    {"BRAID_GUEST_VERBOSE", text, "0", "0|1", 0, 0, "scripts/rdma_guest.sh: show the guest's console and boot timings.", EnvScope::tool},
    {"BRAID_GUEST_CACHE", text, "", "a directory", 0, 0, "scripts/rdma_guest.sh: where the kernel and initramfs are kept (default /var/cache/braid/rdma-guest).", EnvScope::tool},
    {"BRAID_GUEST_KERNEL_PKG", text, "", "a Debian package name", 0, 0, "scripts/rdma_guest.sh: the kernel package (default: the one linux-image-amd64 depends on).", EnvScope::tool},
    {"BRAID_GUEST_QEMU", text, "", "a program", 0, 0, "scripts/rdma_guest.sh: the qemu binary (default qemu-system-x86_64).", EnvScope::tool},
    {"BRAID_IB_TEST_TIMEOUT_S", text, "600", "seconds", 0, 0, "tests/ib/run_ib_tests.sh: bound on each program run in the guest.", EnvScope::tool},
};

}  // namespace

std::span<const EnvVar> env_vars() { return kVars; }

const EnvVar* find_env_var(std::string_view name) {
  for (const EnvVar& v : kVars) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

std::vector<std::string_view> env_choices(const EnvVar& var) {
  std::vector<std::string_view> out;
  std::string_view rest = var.allowed;
  while (!rest.empty()) {
    size_t bar = rest.find('|');
    out.push_back(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  return out;
}

}  // namespace braid

namespace braid {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> unknown_env_warnings(const char* const* entries) {
  constexpr std::string_view kPrefix = "BRAID_";
  std::vector<std::string> out;
  std::vector<std::string_view> seen;
  for (; entries != nullptr && *entries != nullptr; ++entries) {
    std::string_view entry = *entries;
    std::string_view name = entry.substr(0, entry.find('='));
    if (!name.starts_with(kPrefix) || find_env_var(name) != nullptr) continue;
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.push_back(name);
    // A suggestion only within a few edits of the part after BRAID_, so that an unrelated name
    // (BRAID_HOME) gets none rather than a guess.
    const size_t bound = std::max<size_t>(2, (name.size() - kPrefix.size()) / 4);
    const EnvVar* best = nullptr;
    size_t best_distance = bound + 1;
    for (const EnvVar& v : kVars) {
      size_t d = edit_distance(name, v.name);
      if (d < best_distance) best = &v, best_distance = d;
    }
    std::string line = std::string(name) + ": unknown";
    if (best != nullptr) line += "; did you mean " + std::string(best->name) + "?";
    out.push_back(line + " (docs/configuration.md lists every BRAID_ variable)");
  }
  return out;
}

}  // namespace braid
