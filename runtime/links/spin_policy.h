// runtime/links/spin_policy.h - how long this communicator's waiters spin, decided once the ranks
// on this host are known.
//
// A waiter spins (BRAID_SPIN_US, default 50 us) before it sleeps because a wake-up costs tens
// of microseconds. That pays only while the peer it waits for runs on another CPU. When ranks
// of one host may run on the same CPUs (torchrun, mp.spawn and mpirun without binding leave
// them free; braidrun --cpu-bind none), the scheduler often puts two of them on one CPU, and a
// spinning waiter then keeps the very peer it waits for off that CPU for its whole spin, then
// sleeps anyway: every operation pays the spin and a wake-up (docs/performance.md, "Spinning
// where ranks share CPUs", has the figures that chose the rule below).
//
// Words: a rank's CPUs are its affinity mask (sched_getaffinity: taskset, cpusets, braidrun's
// binding). Two ranks share CPUs when they run on the same host (transport/common/host_identity.h's
// host label, the one the shm transport and the ring order use) and their masks intersect:
// the scheduler may then place them on one CPU. Counting ranks against CPUs is not enough:
// two ranks free on two CPUs share them (each may land on the other's CPU, and does), while
// two ranks bound to a CPU each do not.
//
// The rule, when BRAID_SPIN_US is not set (set, it always wins):
//   - no other rank of this communicator on this host may run on one of this rank's CPUs:
//     spin the default (one rank per host; each rank bound to CPUs of its own);
//   - ranks share CPUs, and this host's ranks outnumber its online CPUs: spin the default too.
//     Every spinner then yields its CPU on each pass (common/spin.h: set_ranks_on_node, which
//     this rule feeds with the ranks it counted), so a peer stacked on the same CPU runs at once,
//     and that beats sleeping, which pays a wake-up per step (4 ranks on 2 CPUs);
//   - ranks share CPUs, and every other rank of this host is reached over shm: spin the default.
//     The shm transport's waits see where each peer last polled (Capabilities::watches_peer_cpu)
//     and stop spinning while a peer is queued on the waiter's own CPU, so a stacked pair costs
//     a sleep, as spin 0 would, and a pair on two CPUs answers without a wake-up per step;
//   - ranks share CPUs otherwise (some reached over tcp): spin 0, sleep at once ("spin 0 us: 2
//     ranks on this host share 2 CPUs"): there a spinner pauses on its CPU and keeps a peer
//     stacked on it waiting;
//   - a rank whose mask is unknown (a CPU beyond host_identity's bitmap) falls back to counts:
//     it shares when it may run on more CPUs than its share of the online ones (online / local
//     ranks), which is what binding gives.
// Each communicator decides for itself (a split's members may be fewer on this host); the
// runtime's own waits for a Work (runtime/work.cc) are process-wide and take the smallest spin
// any communicator of the process chose.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "transport/common/host_identity.h"

namespace braid {

struct SpinInputs {
  std::optional<int> explicit_us;  // BRAID_SPIN_US when the user set it
  int default_us = 50;             // when the rule keeps spinning
  int local_ranks = 1;             // ranks of the communicator on this host, this one included
  int watched_ranks = 0;           // of those, the ones reached over a transport that watches (RankCpus::watched)
  // Of those, the ranks whose CPUs intersect this rank's, this one included, and the CPUs of
  // their masks together; sharing_ranks 0: some local rank's mask is unknown.
  int sharing_ranks = 0;
  int sharing_cpus = 0;
  int affinity_cpus = 1;  // CPUs this rank may run on
  int online_cpus = 1;    // CPUs of the host
};

struct SpinChoice {
  int spin_us = 50;
  std::string why;  // for the INFO line: "4 ranks on this host share 2 CPUs"
};

// The rule above. Pure.
SpinChoice choose_spin(const SpinInputs& in);

// Where one rank runs and on which CPUs, as its links card published them.
struct RankCpus {
  std::string host;             // host label
  transport::CpuMask cpus{};    // all zero: unknown
  // This rank reaches it over a transport that stops spinning while it waits on the same CPU
  // (Capabilities::watches_peer_cpu): it need not be counted as one that may share CPUs.
  bool watched = false;
};

// local_ranks, sharing_ranks and sharing_cpus of `in` for rank `rank` of `all` (pure).
void count_sharing(const std::vector<RankCpus>& all, int rank, SpinInputs& in);

// A CPU mask as text (16 hex digits per 64 CPUs, comma-separated; all zero: unknown) and back,
// nullopt when the text is not one: the "cpus" field of the links card (transport_choice.h).
std::string cpu_mask_text(const transport::CpuMask& cpus);
std::optional<transport::CpuMask> parse_cpu_mask(std::string_view text);
// A RankCpus in one line ("<host label>\t<cpu_mask_text>") and back; nullopt when the text
// is not one.
std::string cpus_card(const RankCpus& r);
std::optional<RankCpus> parse_cpus_card(const std::string& text);

// This rank's own card: its host label and affinity mask.
RankCpus local_rank_cpus();

// Decides for rank `rank` from every rank's CPUs (all[rank] is this rank's; PeerLinks keeps
// them from the links cards it exchanged, so no store round of its own; with `all` empty, only
// this rank's own are counted), logs the choice at
// INFO (once per process and value), tells common/spin.h the ranks on this host, and lowers
// the process's wait spin (wait_spin_us) to it. The caller gives the choice to the transports
// (PeerLinks::set_spin_us) and its own waits before the first collective.
SpinChoice settle_spin(const std::vector<RankCpus>& all, const Env& env, int rank);

// The spin Work::wait uses: BRAID_SPIN_US when set, else the smallest any communicator of this
// process settled on (the default before the first).
int wait_spin_us();

}  // namespace braid
