// common/mutex.h - a mutex whose lock contracts clang's thread-safety analysis checks.
//
// libstdc++'s std::mutex carries no capability attributes, so GUARDED_BY(mu) on a std::mutex
// is read by people only. braid::Mutex is the same mutex marked CAPABILITY, MutexLock the
// scoped lock the analysis follows, and CondVar a condition variable that waits under a
// MutexLock (as LevelDB's port::Mutex and port::CondVar). Waits take no predicate: a lambda's
// body is outside the analysis, so callers loop over the condition themselves, under the lock.
// The analysis runs in scripts/test.sh (clang++ -Wthread-safety over the units that use these);
// under gcc the attributes expand to nothing and these are std::mutex and friends.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace braid {

class CondVar;

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// Waits release the lock while they sleep and hold it again when they return, as
// std::condition_variable's do; the caller re-checks its condition.
class CondVar {
 public:
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }
  void wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  // False when `until` passed.
  template <class Clock, class Duration>
  bool wait_until(MutexLock& lock, const std::chrono::time_point<Clock, Duration>& until) {
    return cv_.wait_until(lock.lock_, until) == std::cv_status::no_timeout;
  }

 private:
  std::condition_variable cv_;
};

}  // namespace braid
