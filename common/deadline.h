// common/deadline.h - a point in time every bounded wait is measured against.
#pragma once

#include <chrono>

namespace braid {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline after(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline after_seconds(double s) {
    return after(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s)));
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

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
