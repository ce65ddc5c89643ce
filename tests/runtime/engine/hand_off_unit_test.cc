// HandOff (runtime/engine/hand_off.h) by itself: the prediction of whether a caller waits at once
// for an *_async operation queued on an idle communicator, and the idle progress thread's sleep.
// tests/runtime/async/hand_off_test.cc checks the same behaviour through whole communicators.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "runtime/engine/hand_off.h"

namespace braid {
namespace {

using std::chrono::microseconds;

constexpr microseconds kTick{1000};
constexpr microseconds kAtOnce{100};

std::shared_ptr<detail::WorkState> queue_on_idle(HandOff& h, bool* wake) {
  auto w = std::make_shared<detail::WorkState>();
  *wake = h.queued(/*idle_before=*/true, w);
  return w;
}

int64_t ns(Clock::time_point t) { return std::chrono::nanoseconds(t.time_since_epoch()).count(); }

TEST(HandOff, OffItAlwaysWakesTheProgressThread) {
  HandOff h(/*enabled=*/false, kTick, kAtOnce);
  bool wake = false;
  queue_on_idle(h, &wake);
  EXPECT_TRUE(wake);
}

TEST(HandOff, QueuedBehindOtherWorkItWakesTheProgressThread) {
  HandOff h(true, kTick, kAtOnce);
  EXPECT_TRUE(h.queued(/*idle_before=*/false, std::make_shared<detail::WorkState>()));
}

TEST(HandOff, ACallerThatWaitsAtOnceKeepsItsOperations) {
  HandOff h(true, kTick, kAtOnce);
  bool wake = true;
  auto w = queue_on_idle(h, &wake);
  EXPECT_FALSE(wake);  // the first one is left to its caller: the progress thread is awake anyway
  EXPECT_TRUE(w->timed);
  const auto now = Clock::now();
  w->wait_times.returned_ns.store(ns(now));
  h.waited(*w, ns(now + microseconds(10)));
  queue_on_idle(h, &wake);
  EXPECT_FALSE(wake);
}

TEST(HandOff, ACallerThatComputesFirstGetsTheProgressThread) {
  HandOff h(true, kTick, kAtOnce);
  bool wake = true;
  auto w = queue_on_idle(h, &wake);
  const auto now = Clock::now();
  w->wait_times.returned_ns.store(ns(now));
  h.waited(*w, ns(now + microseconds(5000)));  // computed 5 ms before it waited
  queue_on_idle(h, &wake);
  EXPECT_TRUE(wake);
}

TEST(HandOff, AnOperationTheProgressThreadHadToTakeSendsTheNextToIt) {
  HandOff h(true, kTick, kAtOnce);
  bool wake = true;
  auto w = queue_on_idle(h, &wake);
  h.taken_by_progress(w.get());
  queue_on_idle(h, &wake);
  EXPECT_TRUE(wake);
}

TEST(HandOff, AWaitThatCameAfterCompletionStillCounts) {
  HandOff h(true, kTick, kAtOnce);
  bool wake = true;
  auto w = queue_on_idle(h, &wake);
  // No wait reached waited() (the operation was done first): the times settle it at the next.
  const auto now = Clock::now();
  w->wait_times.returned_ns.store(ns(now));
  w->wait_times.first_wait_ns.store(ns(now + microseconds(5000)));
  queue_on_idle(h, &wake);
  EXPECT_TRUE(wake);
}

TEST(HandOff, AProgressThreadAsleepPastTheTickIsWoken) {
  HandOff h(true, kTick, kAtOnce);
  h.sleeping(Clock::now() + std::chrono::seconds(1));
  bool wake = false;
  auto w = queue_on_idle(h, &wake);
  EXPECT_TRUE(wake);
  const auto now = Clock::now();
  w->wait_times.returned_ns.store(ns(now));
  h.waited(*w, ns(now + microseconds(10)));  // waited at once: the next is left to the caller too
  h.awake();
  queue_on_idle(h, &wake);
  EXPECT_FALSE(wake);
}

TEST(HandOff, TheIdleProgressThreadTicksOverAnOperationLeftToItsCaller) {
  HandOff h(true, kTick, kAtOnce);
  bool wake = true;
  queue_on_idle(h, &wake);
  const auto now = Clock::now();
  const auto board_at = now + std::chrono::seconds(1);
  auto until = h.sleep_until(now, board_at, 1);
  ASSERT_TRUE(until.has_value());
  EXPECT_EQ(*until, now + kTick);
  EXPECT_FALSE(h.sleep_until(now + 2 * kTick, board_at, 1).has_value());  // its grace is over: take it
  EXPECT_FALSE(h.sleep_until(now, board_at, 2).has_value());              // a second one: take them
  EXPECT_FALSE(h.sleep_until(board_at, board_at, 0).has_value());         // the board is due
  // Nothing queued: it lingers, ticking, then sleeps until the board.
  EXPECT_EQ(*h.sleep_until(now, board_at, 0), now + kTick);
  EXPECT_EQ(*h.sleep_until(now + HandOff::kLinger, board_at, 0), board_at);
}

// While a caller holds the engine the progress thread can take nothing: it parks for kParked
// instead of ticking, and an operation left to a caller meanwhile does not wake it.
TEST(HandOff, BehindACallerThatRunsItsOperationsTheProgressThreadParks) {
  HandOff h(true, kTick, kAtOnce);
  bool wake = true;
  auto w = queue_on_idle(h, &wake);  // left to its caller, which takes it (held from now on)
  EXPECT_FALSE(wake);
  h.taken_by_caller();
  const auto now = Clock::now();
  const auto board_at = now + std::chrono::seconds(1);
  const auto until = h.sleep_until(now, board_at, 0, /*held=*/true);
  ASSERT_TRUE(until.has_value());
  EXPECT_EQ(*until, now + HandOff::kParked);
  EXPECT_EQ(*h.sleep_until(now, now + kTick, 0, true), now + kTick);  // the board comes first
  // Parked: the caller's next operation on the idle engine is left to it without a wake-up.
  h.sleeping(*until, /*held=*/true);
  w->wait_times.returned_ns.store(ns(now));
  h.waited(*w, ns(now + microseconds(10)));
  queue_on_idle(h, &wake);
  EXPECT_FALSE(wake);
  // Not in a run of operations kept by callers (no linger): it sleeps until the board, and an
  // operation left to a caller then wakes it, as when it sleeps past a tick.
  HandOff cold(true, kTick, kAtOnce);
  EXPECT_EQ(*cold.sleep_until(now, board_at, 0, true), board_at);
  cold.sleeping(board_at, true);
  queue_on_idle(cold, &wake);
  EXPECT_TRUE(wake);
}

}  // namespace
}  // namespace braid
