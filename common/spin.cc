#include "common/spin.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace braid {
namespace {

std::atomic<int> g_spinners{0};
std::atomic<long> g_yields{0};
std::atomic<bool> g_node_oversubscribed{false};
std::atomic<int> g_waiters{0};
std::atomic<int> g_shared_cpu_peers{0};
thread_local bool t_background = false;

int online_cpus() {
  static const int n = [] {
    long v = sysconf(_SC_NPROCESSORS_ONLN);
    return v > 0 ? static_cast<int>(v) : 1;
  }();
  return n;
}

}  // namespace

int spinning_threads() { return g_spinners.load(std::memory_order_relaxed); }
long spin_yields() { return g_yields.load(std::memory_order_relaxed); }
int cpu_sharing_peers() { return g_shared_cpu_peers.load(std::memory_order_relaxed); }

int usable_cpus() {
  thread_local int cpus = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return static_cast<int>(std::thread::hardware_concurrency());
    return CPU_COUNT(&set);
  }();
  return cpus > 0 ? cpus : 1;
}

void spin_only_for_waiters() { t_background = true; }
bool spin_allowed() {
  if (cpu_sharing_peers() > 0) return false;
  return !t_background || g_waiters.load(std::memory_order_relaxed) > 0;
}
WaitScope::WaitScope() { g_waiters.fetch_add(1, std::memory_order_relaxed); }
WaitScope::~WaitScope() { g_waiters.fetch_sub(1, std::memory_order_relaxed); }

void set_ranks_on_node(int ranks) {
  if (ranks > online_cpus()) g_node_oversubscribed.store(true, std::memory_order_relaxed);
}

SharedCpuPeer::SharedCpuPeer() { g_shared_cpu_peers.fetch_add(1, std::memory_order_relaxed); }
SharedCpuPeer::~SharedCpuPeer() { g_shared_cpu_peers.fetch_sub(1, std::memory_order_relaxed); }

bool step_off_cpu(int cpu) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  if (!CPU_ISSET(cpu, &allowed) || CPU_COUNT(&allowed) < 2) return false;
  cpu_set_t others = allowed;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof others, &others) != 0) return false;
  (void)sched_setaffinity(0, sizeof allowed, &allowed);
  return true;
}

SpinScope::SpinScope() { g_spinners.fetch_add(1, std::memory_order_relaxed); }
SpinScope::~SpinScope() { g_spinners.fetch_sub(1, std::memory_order_relaxed); }

bool SpinScope::yields() const {
  return spinning_threads() > usable_cpus() || g_node_oversubscribed.load(std::memory_order_relaxed) ||
         cpu_sharing_peers() > 0;
}

void SpinScope::pause() const {
  // A SharedCpuPeer stops spins from starting (spin_allowed); this covers one that appears in
  // the middle of a spin (a handshake answer read while spinning).
  if (yields()) {
    g_yields.fetch_add(1, std::memory_order_relaxed);
    sched_yield();
    return;
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace braid
