#include "runtime/links/spin_policy.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>

#include "common/log.h"
#include "common/spin.h"

namespace braid {
namespace {

std::string plural(int n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

int online_cpus() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// The smallest spin a communicator of this process settled on; -1: none yet.
std::atomic<int> g_settled{-1};

void lower_settled(int us) {
  int now = g_settled.load(std::memory_order_relaxed);
  while ((now < 0 || us < now) && !g_settled.compare_exchange_weak(now, us, std::memory_order_relaxed)) {
  }
}

// Once per process and value: every communicator (splits too) settles, and most agree.
void log_once(const SpinChoice& c) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::string line = "spin " + std::to_string(c.spin_us) + " us: " + c.why;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(line).second) {
    BRAID_LOG(info) << line;
  }
}

}  // namespace

SpinChoice choose_spin(const SpinInputs& in) {
  if (in.explicit_us) return {*in.explicit_us, "BRAID_SPIN_US is set"};
  const std::string hint = "; set BRAID_SPIN_US to override";
  if (in.local_ranks <= 1) return {in.default_us, "the only rank of the communicator on this host" + hint};
  // More ranks than the host has CPUs: every spinner already gives its CPU away on each pass
  // (common/spin.h, set_ranks_on_node), so a peer stacked on its CPU runs at once; that beats
  // sleeping, which pays a wake-up per step.
  const std::string outnumber = ", more than the host's " + plural(in.online_cpus, "CPU") +
                                ": spinners yield the CPU on each pass" + hint;
  const bool yielding = in.local_ranks > in.online_cpus;
  // Ranks that may share CPUs but are all reached over shm: its waits see where the peer last
  // ran and stop spinning while it is queued on the waiter's CPU (Capabilities::watches_peer_cpu),
  // so spinning costs nothing when they are stacked and saves a wake-up per step when not.
  const bool watched = in.local_ranks - in.watched_ranks <= 1;
  const std::string over_shm = "every other rank on this host is reached over shm, whose waits stop spinning while"
                               " the peer is queued on the waiter's CPU" + hint;
  if (in.sharing_ranks > 0) {
    if (in.sharing_ranks == 1) {
      return {in.default_us, "no other rank on this host may run on this rank's " +
                                 plural(in.affinity_cpus, "CPU") + hint};
    }
    const std::string shared =
        std::to_string(in.sharing_ranks) + " ranks on this host share " + plural(in.sharing_cpus, "CPU");
    if (yielding) return {in.default_us, shared + " (" + std::to_string(in.local_ranks) + " ranks" + outnumber + ")"};
    if (watched) return {in.default_us, shared + "; " + over_shm};
    return {0, shared + hint};
  }
  // Masks unknown: binding gives each rank its share of the CPUs, and no more.
  const int share = std::max(1, in.online_cpus / in.local_ranks);
  const std::string local = std::to_string(in.local_ranks) + " ranks on this host";
  if (in.affinity_cpus <= share) {
    return {in.default_us, local + ", this one bound to " + plural(in.affinity_cpus, "CPU") + " of " +
                               std::to_string(in.online_cpus) + hint};
  }
  if (yielding) return {in.default_us, local + outnumber};
  if (watched) return {in.default_us, local + "; " + over_shm};
  return {0, local + ", each free to run on " + plural(in.affinity_cpus, "CPU") + " of " +
                 std::to_string(in.online_cpus) + hint};
}

void count_sharing(const std::vector<RankCpus>& all, int rank, SpinInputs& in) {
  const RankCpus& me = all[static_cast<size_t>(rank)];
  in.local_ranks = 0;
  in.watched_ranks = 0;
  in.sharing_ranks = 0;
  bool known = transport::cpu_count(me.cpus) > 0;
  transport::CpuMask together{};
  for (const RankCpus& r : all) {
    if (r.host != me.host) continue;
    ++in.local_ranks;
    if (&r != &me && r.watched) ++in.watched_ranks;
    if (transport::cpu_count(r.cpus) == 0) known = false;
    bool meets = false;
    for (size_t w = 0; w < me.cpus.size(); ++w) meets = meets || (me.cpus[w] & r.cpus[w]) != 0;
    if (!meets) continue;
    ++in.sharing_ranks;
    for (size_t w = 0; w < together.size(); ++w) together[w] |= r.cpus[w];
  }
  in.sharing_cpus = static_cast<int>(transport::cpu_count(together));
  if (!known) in.sharing_ranks = in.sharing_cpus = 0;
}

std::string cpu_mask_text(const transport::CpuMask& cpus) {
  std::string s;
  for (size_t w = 0; w < cpus.size(); ++w) {
    char word[17];
    std::snprintf(word, sizeof word, "%016llx", static_cast<unsigned long long>(cpus[w]));
    if (w > 0) s += ',';
    s += word;
  }
  return s;
}

std::optional<transport::CpuMask> parse_cpu_mask(std::string_view text) {
  transport::CpuMask cpus{};
  size_t at = 0;
  for (size_t w = 0; w < cpus.size(); ++w) {
    if (w > 0) {
      if (at >= text.size() || text[at] != ',') return std::nullopt;
      ++at;
    }
    if (text.size() - at < 16) return std::nullopt;
    uint64_t v = 0;
    for (size_t i = 0; i < 16; ++i) {
      const char c = text[at + i];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return std::nullopt;
      v = v << 4 | static_cast<uint64_t>(d);
    }
    cpus[w] = v;
    at += 16;
  }
  if (at != text.size()) return std::nullopt;
  return cpus;
}

std::string cpus_card(const RankCpus& r) { return r.host + "\t" + cpu_mask_text(r.cpus); }

std::optional<RankCpus> parse_cpus_card(const std::string& text) {
  const size_t tab = text.find('\t');
  if (tab == std::string::npos || tab == 0) return std::nullopt;
  auto cpus = parse_cpu_mask(std::string_view(text).substr(tab + 1));
  if (!cpus) return std::nullopt;
  return RankCpus{text.substr(0, tab), *cpus};
}

RankCpus local_rank_cpus() { return {transport::local_host_label(), transport::local_host_identity().cpus}; }

SpinChoice settle_spin(const std::vector<RankCpus>& all, const Env& env, int rank) {
  SpinInputs in;
  if (env.spin_us_set) in.explicit_us = env.spin_us;
  in.default_us = Env{}.spin_us;
  in.affinity_cpus = usable_cpus();
  in.online_cpus = online_cpus();
  if (rank >= 0 && static_cast<size_t>(rank) < all.size()) {
    count_sharing(all, rank, in);
  } else {  // links made elsewhere (tests) published nothing: only this rank is known
    count_sharing({local_rank_cpus()}, 0, in);
  }
  // What LOCAL_WORLD_SIZE told common/spin.h may be missing (mp.spawn) or count another group.
  set_ranks_on_node(in.local_ranks);
  SpinChoice c = choose_spin(in);
  log_once(c);
  lower_settled(c.spin_us);
  return c;
}

int wait_spin_us() {
  const Result<Env>& env = global_env();
  const int configured = env.is_ok() ? env.value().spin_us : Env{}.spin_us;
  if (env.is_ok() && env.value().spin_us_set) return configured;
  const int settled = g_settled.load(std::memory_order_relaxed);
  return settled >= 0 ? settled : configured;
}

}  // namespace braid
