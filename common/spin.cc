#include "common/spin.h"

#include <sched.h>

#include <atomic>
#include <thread>

namespace braid {
namespace {

std::atomic<int> g_spinners{0};
std::atomic<long> g_yields{0};

}  // namespace

int spinning_threads() { return g_spinners.load(std::memory_order_relaxed); }
long spin_yields() { return g_yields.load(std::memory_order_relaxed); }

int usable_cpus() {
  thread_local int cpus = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return static_cast<int>(std::thread::hardware_concurrency());
    return CPU_COUNT(&set);
  }();
  return cpus > 0 ? cpus : 1;
}

SpinScope::SpinScope() { g_spinners.fetch_add(1, std::memory_order_relaxed); }
SpinScope::~SpinScope() { g_spinners.fetch_sub(1, std::memory_order_relaxed); }

void SpinScope::pause() const {
  if (spinning_threads() > usable_cpus()) {
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
