// HandOff (runtime/engine/hand_off.h) by itself: the prediction of whether a caller waits at once
// for an *_async operation queued on an idle communicator, and the idle progress thread's sleep.
// tests/runtime/async/hand_off_test.cc checks the same behaviour through whole communicators.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <memory>

#include "braid/work.h"
#include "runtime/engine/hand_off.h"

// Counts this thread's exact clock reads (CLOCK_MONOTONIC: steady_clock::now()) and passes each
// on to the C library's: defined in the executable, it stands in for libc's everywhere.
namespace {
thread_local int exact_clock_reads = 0;
}  // namespace

extern "C" __attribute__((no_sanitize("address"))) int clock_gettime(clockid_t id, timespec* ts) noexcept {
  using Read = int (*)(clockid_t, timespec*);
  static const auto real = reinterpret_cast<Read>(dlsym(RTLD_NEXT, "clock_gettime"));
  if (id == CLOCK_MONOTONIC) ++exact_clock_reads;
  return real(id, ts);
}

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

// The counter at a span `d` from `base` (CycleClock counts, as WorkState keeps them).
int64_t at(int64_t base, microseconds d) { return base + CycleClock::span(d); }

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
  const int64_t now = CycleClock::now();
  w->wait_times.returned.store(now);
  h.waited(*w, at(now, microseconds(10)));
  queue_on_idle(h, &wake);
  EXPECT_FALSE(wake);
}

TEST(HandOff, ACallerThatComputesFirstGetsTheProgressThread) {
  HandOff h(true, kTick, kAtOnce);
  bool wake = true;
  auto w = queue_on_idle(h, &wake);
  const int64_t now = CycleClock::now();
  w->wait_times.returned.store(now);
  h.waited(*w, at(now, microseconds(5000)));  // computed 5 ms before it waited
  queue_on_idle(h, &wake);
  EXPECT_TRUE(wake);
}

TEST(HandOff, AnOperationTheProgressThreadHadToTakeSendsTheNextToIt) {
  HandOff h(true, kTick, kAtOnce);
  bool wake = true;
  auto w = queue_on_idle(h, &wake);
  h.taken_by_progress(w);
  queue_on_idle(h, &wake);
  EXPECT_TRUE(wake);
}

TEST(HandOff, AWaitThatCameAfterCompletionStillCounts) {
  HandOff h(true, kTick, kAtOnce);
  bool wake = true;
  auto w = queue_on_idle(h, &wake);
  h.taken_by_progress(w);
  // No wait reached waited() (the operation was done first): the times settle it at the next.
  const int64_t now = CycleClock::now();
  w->wait_times.returned.store(now);
  w->wait_times.first_wait.store(at(now, microseconds(5000)));
  queue_on_idle(h, &wake);
  EXPECT_TRUE(wake);
  // The progress thread finished the next one too, and its caller came at once after: it is
  // left to its caller again.
  auto next = queue_on_idle(h, &wake);
  h.taken_by_progress(next);
  const int64_t then = next->wait_times.returned.load();
  next->wait_times.first_wait.store(at(then, microseconds(10)));
  queue_on_idle(h, &wake);
  EXPECT_FALSE(wake);
}

TEST(HandOff, AProgressThreadAsleepPastTheTickIsWoken) {
  HandOff h(true, kTick, kAtOnce);
  h.sleeping(Clock::now() + std::chrono::seconds(1));
  bool wake = false;
  auto w = queue_on_idle(h, &wake);
  EXPECT_TRUE(wake);
  const int64_t now = CycleClock::now();
  w->wait_times.returned.store(now);
  h.waited(*w, at(now, microseconds(10)));  // waited at once: the next is left to the caller too
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
  const int64_t count = CycleClock::now();
  w->wait_times.returned.store(count);
  h.waited(*w, at(count, microseconds(10)));
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

// A caller's steady `_async(...).wait()` loop reads no exact clock in the hand-off (a read is a fair
// share of a small operation on a virtual machine): not when its operation is left to it while
// the progress thread is awake, ticking or parked behind it, and not when it waits.
TEST(HandOff, LeavingAnOperationToItsCallerReadsNoClock) {
  if (!CycleClock::on_tsc()) GTEST_SKIP() << "the cycle counter is the steady clock on this machine";
  HandOff h(true, kTick, kAtOnce);
  const auto board_at = Clock::now() + std::chrono::seconds(1);
  bool wake = true;
  auto settle = [&](const std::shared_ptr<detail::WorkState>& w) {
    h.taken_by_caller();
    h.waited(*w, w->note_wait());
  };
  int reads = exact_clock_reads;
  (void)Clock::now();
  ASSERT_EQ(exact_clock_reads - reads, 1) << "the count does not see steady_clock::now()";
  reads = exact_clock_reads;
  auto w = queue_on_idle(h, &wake);  // the progress thread is awake
  settle(w);
  EXPECT_FALSE(wake);
  EXPECT_EQ(exact_clock_reads - reads, 0) << "with the progress thread awake";
  const auto now = Clock::now();
  h.sleeping(*h.sleep_until(now, board_at, 0));  // ticking
  reads = exact_clock_reads;
  w = queue_on_idle(h, &wake);
  settle(w);
  EXPECT_FALSE(wake);
  EXPECT_EQ(exact_clock_reads - reads, 0) << "with the progress thread ticking";
  h.awake();
  h.sleeping(*h.sleep_until(now, board_at, 0, /*held=*/true), /*held=*/true);  // parked
  reads = exact_clock_reads;
  w = queue_on_idle(h, &wake);
  settle(w);
  EXPECT_FALSE(wake);
  EXPECT_EQ(exact_clock_reads - reads, 0) << "with the progress thread parked";
  // A wait for a finished operation (the caller ran it) reads none either.
  w->complete(Status());
  reads = exact_clock_reads;
  Work(w).wait();
  EXPECT_EQ(exact_clock_reads - reads, 0) << "in Work::wait()";
}

// The grace of an operation left to its caller starts at the progress thread's next look: the
// operation stays the caller's for a tick from there, and is taken after it.
TEST(HandOff, TheGraceStartsAtTheProgressThreadsNextLook) {
  HandOff h(true, kTick, kAtOnce);
  const auto now = Clock::now();
  const auto board_at = now + std::chrono::seconds(1);
  bool wake = true;
  auto first = queue_on_idle(h, &wake);  // left to its caller, which takes it at once
  h.taken_by_caller();
  h.waited(*first, first->note_wait());
  h.sleeping(*h.sleep_until(now, board_at, 0));  // lingering: it ticks
  queue_on_idle(h, &wake);
  EXPECT_FALSE(wake);
  const auto look = now + kTick;  // its next tick finds the operation
  EXPECT_EQ(*h.sleep_until(look, board_at, 1), look + kTick);
  EXPECT_EQ(*h.sleep_until(look + kTick / 2, board_at, 1), look + kTick + kTick / 2);
  EXPECT_FALSE(h.sleep_until(look + kTick, board_at, 1).has_value()) << "past its grace: the progress thread takes it";
}

// A caller that takes its operation from the engine's slot does so without the queue's lock,
// and so without taken_by_caller() or waited() (op_queue.h): how soon it came is passed on
// before the next operation is queued (took_in_slot), and settles the prediction as a wait does.
TEST(HandOff, ACallerThatTookItsOperationFromTheSlotSettlesThePrediction) {
  HandOff h(true, kTick, kAtOnce);
  bool wake = true;
  queue_on_idle(h, &wake);
  EXPECT_FALSE(wake);
  h.took_in_slot(CycleClock::span(microseconds(10)));
  queue_on_idle(h, &wake);
  EXPECT_FALSE(wake) << "waited at once: the next one is left to its caller too";
  h.took_in_slot(CycleClock::span(2 * kAtOnce));  // came late
  queue_on_idle(h, &wake);
  EXPECT_TRUE(wake) << "computed first: the next one starts at once";
}

// The grace belongs to the operation left to its caller. Once that one was taken (by its caller,
// without telling the hand-off), an operation queued behind a busy engine has none: the progress
// thread takes it at once when the engine is free, not a tick later.
TEST(HandOff, AnOperationQueuedBehindAnotherHasNoGrace) {
  HandOff h(true, kTick, kAtOnce);
  const auto now = Clock::now();
  const auto board_at = now + std::chrono::seconds(1);
  bool wake = true;
  queue_on_idle(h, &wake);  // left to its caller
  EXPECT_FALSE(wake);
  ASSERT_EQ(*h.sleep_until(now, board_at, 1), now + kTick);  // its grace runs from this look
  // Its caller takes it (no taken_by_caller: op_queue.h's slot) and runs it; another thread
  // queues behind.
  EXPECT_TRUE(h.queued(/*idle_before=*/false, std::make_shared<detail::WorkState>()));
  EXPECT_FALSE(h.sleep_until(now + kTick / 2, board_at, 1).has_value()) << "queued behind: no grace";
}

}  // namespace
}  // namespace braid
