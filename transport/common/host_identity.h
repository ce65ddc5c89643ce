// transport/common/host_identity.h - which host a process runs on (for the runtime's choice of a
// transport per peer), which kernel and which CPUs (so two ends of a tcp connection can tell
// whether they compete for one CPU).
//
// Same host, for choosing a transport (host_label): the same kernel (boot id), the same network
// namespace and the same shared-memory mount. Processes of one kernel in different network
// namespaces or containers count as different hosts, so the project's multi-host tests in
// network namespaces still cross their links, and a container with a /dev/shm of its own cannot
// map a peer's shared memory anyway.
//
// Why: a waiter spins (busy-waits) briefly before it sleeps, because a wake-up is costly. When
// the peer it waits for is confined to the same single CPU, the peer cannot answer while we
// spin, and every round trip pays the whole spin (docs/code_figures.md, "Spinning"). common/spin.h yields when this process's spinners outnumber its CPUs;
// this is the same test across processes, two spinners (us and the peer) on fewer than two
// CPUs; what follows from it (transport waits do not spin at all) is in common/spin.h. The connection handshake and its answer
// carry a HostIdentity each way (transport/common/handshake_format.h).
//
// Same host: the kernel's boot id (/proc/sys/kernel/random/boot_id) is random per boot and
// shared by every process of that kernel, network namespaces and containers included; two
// processes with the same boot id share the same CPUs. An id that cannot be read is all zero
// and never matches, so an unknown host never counts as ours.
//
// CPUs: the affinity mask of the calling thread (sched_getaffinity), as a bitmap of the first
// kMaxCpus CPUs. taskset and cgroup cpusets set it for every thread; a program that narrows
// one thread's affinity after the connection was made is not seen. A mask with a CPU beyond the
// bitmap (or one that cannot be read) is sent empty, meaning "unknown", and never counts as
// shared.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace braid::transport {

inline constexpr size_t kMaxCpus = 1024;
using BootId = std::array<uint8_t, 16>;
using CpuMask = std::array<uint64_t, kMaxCpus / 64>;  // bit c of word c / 64: CPU c

struct HostIdentity {
  BootId boot_id{};  // all zero: unknown
  CpuMask cpus{};    // empty: unknown
};

// This kernel's boot id (read once) and the calling thread's CPUs.
HostIdentity local_host_identity();

// Where a process lives, as far as sharing memory goes: kernel, network namespace, shm mount.
struct HostKey {
  BootId boot_id{};         // all zero: unknown
  uint64_t net_ns = 0;      // inode of the calling thread's network namespace; 0: unknown
  uint64_t shm_device = 0;  // st_dev of /dev/shm; 0: unknown
};
HostKey local_host_key();
// The key as text for the store ("5e1c0a3e-...-1f2a3b4c5d6e/net:4026531992/shm:24"): equal
// texts, same host. An unknown part makes the label unique to this process ("unknown/pid:..."),
// so an unknown host is never taken for another process's.
std::string host_label(const HostKey& key);
std::string local_host_label();

// The 16 bytes of a boot id as the kernel prints it ("5e1c0a3e-0c8b-4f43-9d7e-1f2a3b4c5d6e",
// newline allowed); nullopt when the text is not one.
std::optional<BootId> parse_boot_id(std::string_view text);
// The reverse, lowercase; empty for the unknown (all-zero) id.
std::string boot_id_text(const BootId& id);

size_t cpu_count(const CpuMask& mask);
CpuMask cpu_mask_of(std::initializer_list<size_t> cpus);  // for tests and messages
std::string describe_cpus(const CpuMask& mask);            // "0", "0-3,8", "unknown"

// Whether a peer described by `peer` competes with `self` for one CPU: same host (equal boot
// ids, not unknown), both masks known, and their union has fewer than two CPUs (so both are
// confined to the same single CPU). Symmetric: both ends of a connection reach the same answer.
bool shares_single_cpu(const HostIdentity& self, const HostIdentity& peer);

}  // namespace braid::transport
