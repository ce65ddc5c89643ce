// runtime/engine/held_completions.h - completions the progress thread holds until it gave the
// engine back.
//
// On the progress thread, the operation it took last completes only once the engine is
// released (complete_held): a caller that waits at once issues its next operation as soon as it
// sees this one done, and would otherwise find the communicator still busy and queue it, and so
// every later one, behind the progress thread (a wake-up each way per operation). Operations
// still complete in the order they ran: a completion on another thread first completes what is
// held (mu_ keeps that order).
//
// Threading: set_holding() only by the thread that holds the engine (op_queue.h); the rest from
// any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "runtime/work_state.h"

namespace braid {

class HeldCompletions {
 public:
  // `before_complete`: the test hook CommunicatorConfig::before_held_complete; outlives this.
  explicit HeldCompletions(const std::function<void()>& before_complete) : before_complete_(before_complete) {}

  // Set by the progress thread around the operation it runs; returns the previous value.
  bool set_holding(bool hold) { return std::exchange(holding_, hold); }
  // Completes `work`, which this thread has just finished, with `s`; held while holding.
  void complete_last(const std::shared_ptr<detail::WorkState>& work, Status s) EXCLUDES(mu_);
  // Completes what is held, in order.
  void complete_held() EXCLUDES(mu_);

 private:
  const std::function<void()>& before_complete_;
  bool holding_ = false;
  Mutex mu_;
  std::vector<std::pair<std::shared_ptr<detail::WorkState>, Status>> held_ GUARDED_BY(mu_);
  // held_.size(), stored under mu_ once its completions are done: 0 lets complete_last skip mu_.
  std::atomic<size_t> held_count_{0};
};

}  // namespace braid
