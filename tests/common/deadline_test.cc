// common/deadline.h: the coarse clock small operations set their deadlines from and check them
// against must be the steady clock's, read from the last tick: never ahead of it, and behind it
// by at most a tick.
#include "common/deadline.h"

#include <gtest/gtest.h>

namespace braid {
namespace {

using namespace std::chrono_literals;

// A tick is 1-10 ms (CONFIG_HZ 1000 down to 100); a clock of another base (CLOCK_REALTIME,
// CLOCK_BOOTTIME after a suspend) would be off by far more.
constexpr auto kTick = 20ms;

TEST(CoarseClock, IsTheSteadyClockAtMostATickBehind) {
  for (int i = 0; i < 1000; ++i) {
    const Clock::time_point before = Clock::now();
    const Clock::time_point coarse = coarse_now();
    const Clock::time_point after = Clock::now();
    ASSERT_LE(coarse, after) << "the coarse clock is ahead of the steady clock";
    ASSERT_GT(coarse, before - kTick) << "the coarse clock is more than a tick behind the steady clock";
  }
}

TEST(CoarseClock, ADeadlineFromItIsAtMostATickEarlierThanAnExactOne) {
  const Deadline exact = Deadline::after_seconds(30);
  const Deadline coarse = Deadline::coarse_after_seconds(30);
  EXPECT_LE(coarse.at(), exact.at() + 1ms);
  EXPECT_GT(coarse.at(), exact.at() - kTick);
  EXPECT_FALSE(coarse.expired());
  EXPECT_TRUE(Deadline::coarse_after_seconds(-1).expired());
}

}  // namespace
}  // namespace braid
