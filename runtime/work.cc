#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <ctime>
#include <thread>
#include <utility>

#include "braid/work.h"
#include "common/cycle_clock.h"
#include "common/env.h"
#include "common/spin.h"
#include "runtime/links/spin_policy.h"
#include "runtime/work_state.h"

namespace braid {
namespace detail {
namespace {

// The done word as the futex system call takes it.
static_assert(sizeof(std::atomic<int>) == sizeof(int) && std::atomic<int>::is_always_lock_free);
int* futex_word(const std::atomic<int>& a) { return reinterpret_cast<int*>(const_cast<std::atomic<int>*>(&a)); }

}  // namespace

void WorkState::complete(Status s) {
  status_ = std::move(s);
  // Sequentially consistent with the sleeper count's update in wait_until: either the waiter
  // sees the word set before it sleeps, or this sees the waiter and wakes it.
  done_.store(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    syscall(SYS_futex, futex_word(done_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }
  if (on_done) std::exchange(on_done, nullptr)();
}

WorkState::~WorkState() {
  if (on_done) on_done();
}

void WorkState::note_returned() const {
  if (timed) wait_times.returned.store(CycleClock::now(), std::memory_order_relaxed);
}

int64_t WorkState::note_wait() const {
  if (!timed) return 0;
  const int64_t now = CycleClock::now();
  // No compare-exchange (a locked instruction per operation): waits that race here come within
  // a few nanoseconds of each other, and either stands for the first.
  if (wait_times.first_wait.load(std::memory_order_relaxed) == 0) wait_times.first_wait.store(now, std::memory_order_relaxed);
  return now;
}

const Status& WorkState::status() const {
  static const Status kNotYet;
  return done() ? status_ : kNotYet;  // written once, before done_ (release): final once seen
}

bool WorkState::wait_until(Deadline deadline, int spin_us) const {
  if (done()) return true;  // often so (the caller ran it): no clock read
  WaitScope waiting;        // lets the progress thread spin for us (common/spin.h)
  auto spin_end = Clock::now() + std::chrono::microseconds(spin_us);
  {
    SpinScope spin;
    while (Clock::now() < spin_end) {
      if (done()) return true;
      // Yield, never pause: the thread this one waits for (the progress thread) may have just
      // been woken on this very CPU, and a pausing spin would keep it off until the spin ends.
      std::this_thread::yield();
    }
  }
  // Asleep on the done word, not in slices: the waiter wakes as the operation completes (a CUDA
  // stream held for an operation resumed up to a slice late), and still by the deadline.
  const bool bounded = deadline.at() != Clock::time_point::max();
  timespec at{};
  if (bounded) {
    const auto since = deadline.at().time_since_epoch();  // steady_clock is CLOCK_MONOTONIC
    at.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(since).count();
    at.tv_nsec = (since - std::chrono::seconds(at.tv_sec)).count();
  }
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (done_.load(std::memory_order_seq_cst) == 0) {
    if (bounded && deadline.expired()) break;
    // Returns at once when the word is no longer 0; woken by complete(), the deadline or a signal.
    syscall(SYS_futex, futex_word(done_), FUTEX_WAIT_BITSET_PRIVATE, 0, bounded ? &at : nullptr, nullptr,
            FUTEX_BITSET_MATCH_ANY);
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
  return done();
}

int spin_us_setting() { return wait_spin_us(); }  // runtime/links/spin_policy.h

#if defined(__SANITIZE_ADDRESS__)
std::shared_ptr<WorkState> make_work_state() { return std::make_shared<WorkState>(); }
#else
namespace {

// Blocks of one size kept by a thread for the next WorkState it makes (make_work_state). Plain
// data, so that a thread reaches it with one look-up of its thread-local storage and no guard;
// the blocks are freed when the thread exits by a second thread-local object, made the first
// time the cache keeps a block. The usual keep and take compare one field and the count (the
// block size is 0 until the first keep, and kGone once the thread exits), so each reaches the
// thread-local storage once.
struct BlockCache {
  static constexpr size_t kKept = 8;  // a few operations in flight per thread
  static constexpr size_t kGone = ~size_t{0};
  void* blocks[kKept];
  size_t count;
  size_t bytes;

  void* take(size_t n) { return n == bytes && count > 0 ? blocks[--count] : nullptr; }
  bool keep(void* p, size_t n) {
    if (n != bytes || count == kKept) return keep_first(p, n);
    blocks[count++] = p;
    return true;
  }
  bool keep_first(void* p, size_t n);
};
thread_local BlockCache cache;

struct CacheReleaser {
  CacheReleaser() = default;
  CacheReleaser(const CacheReleaser&) = delete;
  CacheReleaser& operator=(const CacheReleaser&) = delete;
  ~CacheReleaser() {
    BlockCache& c = cache;
    c.bytes = BlockCache::kGone;  // keep nothing more
    while (c.count > 0) ::operator delete(c.blocks[--c.count]);
  }
  void arm() {}
};
thread_local CacheReleaser releaser;

// The first block this thread keeps: arms the releaser. Else (full, another size, the thread
// exiting): not kept.
__attribute__((noinline)) bool BlockCache::keep_first(void* p, size_t n) {
  if (bytes != 0) return false;
  releaser.arm();  // makes it, and so its run at thread exit
  bytes = n;
  blocks[count++] = p;
  return true;
}

// What std::allocate_shared asks for: one block for the count and the WorkState together.
template <typename T>
struct CachedAllocator {
  using value_type = T;
  CachedAllocator() = default;
  template <typename U>
  explicit CachedAllocator(const CachedAllocator<U>&) {}
  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
    void* p = n == 1 ? cache.take(sizeof(T)) : nullptr;
    return static_cast<T*>(p != nullptr ? p : ::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n == 1 && cache.keep(p, sizeof(T))) return;
    ::operator delete(p);
  }
  template <typename U>
  bool operator==(const CachedAllocator<U>&) const { return true; }
};

}  // namespace

std::shared_ptr<WorkState> make_work_state() { return std::allocate_shared<WorkState>(CachedAllocator<WorkState>()); }
#endif

}  // namespace detail

namespace {

void check_not_in_open_group(const detail::WorkState& state) {
  if (state.in_open_group.load()) {
    throw Error(ErrorCode::invalid_argument,
                "waiting for an operation issued inside group_start() before group_end(): it cannot start until "
                "the group ends. Use the *_async calls inside a group and wait after group_end()");
  }
}

}  // namespace

void Work::wait() {
  if (!state_) return;
  check_not_in_open_group(*state_);
  const int64_t waited = state_->note_wait();
  if (state_->runner != nullptr && !state_->done()) state_->runner->help(*state_, waited);
  if (!state_->done()) state_->wait_until(Deadline::never(), detail::spin_us_setting());  // often done: it ran here
  if (const Status& s = state_->status(); !s.is_ok()) raise_if_error(s);
}

bool Work::wait_for(std::chrono::milliseconds timeout) {
  if (!state_) return true;
  check_not_in_open_group(*state_);
  state_->note_wait();
  // No help() here: running the operation on this thread would not honour `timeout`.
  if (!state_->wait_until(Deadline::after(timeout), detail::spin_us_setting())) return false;
  raise_if_error(state_->status());
  return true;
}

bool Work::test() const { return !state_ || state_->done(); }

ErrorCode Work::error_code() const { return state_ && state_->done() ? state_->status().code() : ErrorCode::ok; }

std::string Work::error_message() const { return state_ && state_->done() ? state_->status().message() : ""; }

}  // namespace braid
