// common/deadline.h - a point in time every bounded wait is measured against.
#pragma once

#include <time.h>

#include <chrono>

namespace braid {

using Clock = std::chrono::steady_clock;

// Clock::now() from the kernel's last tick instead of the time stamp counter: at most a tick (a
// few milliseconds) behind, for a fraction of the cost of an exact read (a clock read is a fair
// share of a small operation on a virtual machine, docs/performance.md). For bounds of seconds
// that small operations set and check. steady_clock is CLOCK_MONOTONIC on Linux, and so is this.
inline Clock::time_point coarse_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

class Deadline {
 public:
  static Deadline after(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline after_seconds(double s) {
    return after(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s)));
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  // after_seconds from coarse_now(): up to a tick earlier than the exact one.
  static Deadline coarse_after_seconds(double s) {
    return Deadline(coarse_now() +
                    std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s)));
  }

  bool expired() const { return Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }
  // Time left, never negative.
  std::chrono::nanoseconds remaining() const {
    auto now = Clock::now();
    return now >= at_ ? std::chrono::nanoseconds(0) : std::chrono::duration_cast<std::chrono::nanoseconds>(at_ - now);
  }
  // Time left in milliseconds for poll(2)-style calls, clamped to [0, cap_ms].
  int remaining_ms(int cap_ms = 1 << 30) const {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(remaining()).count();
    if (ms == 0 && !expired()) ms = 1;
    return ms > cap_ms ? cap_ms : static_cast<int>(ms);
  }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace braid
