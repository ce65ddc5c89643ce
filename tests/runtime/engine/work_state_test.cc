// WorkState (runtime/work_state.h) by itself: completion and waiting without a lock, asleep on the
// done word until completion or the deadline.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <chrono>
#include <memory>
#include <mutex>
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

// Counts this thread's heap allocations (the replaceable global operator new).
namespace {
thread_local int heap_allocations = 0;
}  // namespace

// The replacements pair with each other (GCC cannot see that through inlining).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t bytes) {
  ++heap_allocations;
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace braid {
namespace {

using namespace std::chrono_literals;

// A caller's operations one after another: each one's state comes from the memory the last one
// gave back, not from the heap.
TEST(WorkState, OperationsOneAfterAnotherOnAThreadReuseTheirMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer every WorkState comes from the heap";
#endif
  { auto first = detail::make_work_state(); }
  const int before = heap_allocations;
  for (int i = 0; i < 100; ++i) {
    auto state = detail::make_work_state();
    state->complete(Status());
    Work(state).wait();
  }
  EXPECT_LE(heap_allocations - before, 0) << "WorkStates made on the heap for 100 operations";
}

// A small operation that its caller ran is completed and then waited for: neither takes a lock.
TEST(WorkState, CompletingAndWaitingForARunOperationTakeNoLock) {
  std::mutex seam;
  int before = mutex_locks;
  seam.lock();
  seam.unlock();
  ASSERT_EQ(mutex_locks - before, 1) << "the count does not see std::mutex";
  auto w = std::make_shared<detail::WorkState>();
  before = mutex_locks;
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
