// common/cycle_clock.h - a cheap counter for asking whether a short span passed a bound.
//
// The hand-off between a caller and the progress thread (runtime/engine/hand_off.h) asks of
// every small operation whether its caller came to wait within about 100 us of getting it back.
// An exact clock read (steady_clock::now(), a vDSO call that reads the time stamp counter and
// scales it under a sequence lock) is a fair share of such an operation on a virtual machine
// (docs/performance.md); the counter it scales is one instruction. So spans that are only
// compared with a bound are taken in counts: now() at both ends, the difference compared with
// span(bound), which converts the bound once.
//
// The counter is the time stamp counter where the kernel keeps its own clock on it (clocksource
// "tsc": the kernel checked that it runs at a constant rate and agrees across CPUs); elsewhere
// it is the steady clock in nanoseconds. Counts are not times: never compare them with a
// time_point, only with each other and with span().
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace braid {

class CycleClock {
 public:
  // The counter now; 0 never comes back (a caller may use 0 for "not read").
  static int64_t now() {
#if defined(__x86_64__)
    if (on_tsc()) return static_cast<int64_t>(__rdtsc()) | 1;
#endif
    return steady_ns() | 1;
  }
  // `d` in counts. The first call in a process measures the counter's rate against the steady
  // clock over a couple of milliseconds: call it where a communicator is made, not per operation.
  static int64_t span(std::chrono::nanoseconds d) { return static_cast<int64_t>(static_cast<double>(d.count()) * per_ns()); }
  // Whether the counter is the time stamp counter (else the steady clock).
  static bool on_tsc() {
    static const bool tsc = kernel_clock_is_tsc();
    return tsc;
  }

 private:
  static int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  static bool kernel_clock_is_tsc() {
#if defined(__x86_64__)
    std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    std::string name;
    return f >> name && name == "tsc";
#else
    return false;
#endif
  }
  static double per_ns() {
    static const double rate = [] {
      if (!on_tsc()) return 1.0;
      // Each end pairs a counter read with the steady clock's; sleeping between them makes the
      // reads' own cost and any preemption around them a small part of the span.
      const int64_t n0 = steady_ns(), c0 = now();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const int64_t n1 = steady_ns(), c1 = now();
      return n1 > n0 && c1 > c0 ? static_cast<double>(c1 - c0) / static_cast<double>(n1 - n0) : 1.0;
    }();
    return rate;
  }
};

}  // namespace braid
