// WorkState (runtime/work_state.h) by itself: completion and waiting without a lock, asleep on the
// done word until completion or the deadline.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "braid/work.h"
#include "runtime/work_state.h"

// Counts this thread's mutex locks and passes each on to the C library's: defined in the
// executable, it stands in for libc's everywhere.
namespace {
thread_local int mutex_locks = 0;
}  // namespace

extern "C" __attribute__((no_sanitize("address"))) int pthread_mutex_lock(pthread_mutex_t* m) noexcept {
  using Lock = int (*)(pthread_mutex_t*);
  static const auto real = reinterpret_cast<Lock>(dlsym(RTLD_NEXT, "pthread_mutex_lock"));
  ++mutex_locks;
  return real(m);
}

namespace braid {
namespace {

using namespace std::chrono_literals;

// A small operation that its caller ran is completed and then waited for: neither takes a lock.
TEST(WorkState, CompletingAndWaitingForARunOperationTakeNoLock) {
  auto w = std::make_shared<detail::WorkState>();
  const int before = mutex_locks;
  w->complete(Status());
  Work(w).wait();
  EXPECT_EQ(mutex_locks - before, 0);
}

TEST(WorkState, ASleepingWaiterWakesWhenTheOperationCompletes) {
  auto w = std::make_shared<detail::WorkState>();
  std::atomic<bool> woke{false};
  std::thread waiter([&] {
    EXPECT_TRUE(w->wait_until(Deadline::never(), /*spin_us=*/0));
    woke = true;
  });
  std::this_thread::sleep_for(50ms);  // asleep by now
  EXPECT_FALSE(woke.load());
  w->complete(Status(ErrorCode::peer_lost, "rank 1 is gone"));
  waiter.join();
  EXPECT_TRUE(woke.load());
  EXPECT_EQ(w->status().code(), ErrorCode::peer_lost);
  EXPECT_EQ(Work(w).error_message(), "rank 1 is gone");
}

TEST(WorkState, AWaitGivesUpAtItsDeadlineAndTheOperationGoesOn) {
  auto w = std::make_shared<detail::WorkState>();
  const auto start = Clock::now();
  EXPECT_FALSE(w->wait_until(Deadline::after(30ms), /*spin_us=*/0));
  EXPECT_GE(Clock::now() - start, 30ms);
  EXPECT_TRUE(w->status().is_ok()) << "not done: no outcome yet";
  EXPECT_FALSE(Work(w).wait_for(10ms));
  w->complete(Status());
  EXPECT_TRUE(Work(w).wait_for(10ms));
}

// Many waiters, some bounded, all woken by one completion.
TEST(WorkState, EveryWaiterWakesAtTheCompletion) {
  auto w = std::make_shared<detail::WorkState>();
  std::atomic<int> woke{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] {
      const Deadline d = i % 2 == 0 ? Deadline::never() : Deadline::after(std::chrono::seconds(60));
      if (w->wait_until(d, 0)) ++woke;
    });
  }
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(woke.load(), 0);
  w->complete(Status());
  for (auto& t : waiters) t.join();
  EXPECT_EQ(woke.load(), 4);
}

}  // namespace
}  // namespace braid
