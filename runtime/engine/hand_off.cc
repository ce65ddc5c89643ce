#include "runtime/engine/hand_off.h"

#include <algorithm>

namespace braid {

bool HandOff::queued(bool idle_before, const std::shared_ptr<detail::WorkState>& work) {
  if (!enabled_) return true;
  // Whatever was left to its caller before is taken by now, or queued ahead of this one (then the
  // progress thread takes both at once): no grace is pending. Its caller may have taken it
  // without the queue's lock (op_queue.h), so without taken_by_caller().
  grace_until_ = {};
  grace_unset_ = false;
  if (!idle_before) return true;
  const int64_t now = CycleClock::now();
  if (idle_times_) {
    // The last prediction, settled after the fact: the progress thread took its operation, and
    // it may have finished before its caller waited, so that no wait reached help(); when that
    // wait came decides, as it would have there. Never waited (another operation came first):
    // computes.
    const int64_t waited = idle_times_->first_wait.load(std::memory_order_relaxed);
    const int64_t returned = idle_times_->returned.load(std::memory_order_relaxed);
    callers_wait_ = waited != 0 && waited - returned < waits_at_once_;
    idle_times_ = nullptr;
  }
  idle_work_ = work.get();
  work->timed = true;
  // The operation goes back to its caller now, unless the progress thread is woken first (the
  // queue then notes the return again after the wake-up: WorkState::note_returned).
  work->wait_times.returned.store(now, std::memory_order_relaxed);
  if (!callers_wait_) return true;  // the caller computes meanwhile: start it at once
  grace_unset_ = true;   // the progress thread's next look starts its grace
  linger_unset_ = true;  // ... and the linger
  // Awake (it looks at the queue before it waits again), ticking, or parked behind a caller for
  // at most kParked: no wake-up, which would cost the caller about as much as the operation it is
  // about to run. Only a longer sleep needs the clock.
  if (progress_wakes_at_ == Clock::time_point::min() || wakes_soon_) return false;
  const std::chrono::microseconds looks_within = parked_ ? std::chrono::microseconds(kParked) : tick_;
  return progress_wakes_at_ > Clock::now() + looks_within;
}

void HandOff::waited(const detail::WorkState& work, int64_t waited) {
  // Whether the caller waits at once for what it queued on an idle communicator, whoever runs
  // it: the prediction for the next one (queued).
  if (&work != idle_work_) return;
  const int64_t returned = work.wait_times.returned.load(std::memory_order_relaxed);
  const int64_t at = waited != 0 ? waited : CycleClock::now();
  callers_wait_ = returned == 0 || at - returned < waits_at_once_;
  idle_work_ = nullptr;
  idle_times_ = nullptr;
}

void HandOff::took_in_slot(int64_t span) {
  callers_wait_ = span < waits_at_once_;
  idle_work_ = nullptr;
  idle_times_ = nullptr;
}

void HandOff::taken_by_progress(const std::shared_ptr<detail::WorkState>& front) {
  if (!front || front.get() != idle_work_) return;
  // Its wait, if it comes after the operation finished, reaches no help(): the next queued()
  // reads when it came from here.
  idle_times_ = std::shared_ptr<detail::WorkState::WaitTimes>(front, &front->wait_times);  // no allocation
  if (callers_wait_) {
    callers_wait_ = false;
    idle_work_ = nullptr;
  }
}

std::optional<Clock::time_point> HandOff::sleep_until(Clock::time_point now, Clock::time_point board_at,
                                                      size_t queued, bool held) {
  looked_at_ = now;
  if (grace_unset_) {
    grace_until_ = now + tick_;
    grace_unset_ = false;
  }
  if (linger_unset_) {
    linger_until_ = now + kLinger;
    linger_unset_ = false;
  }
  if (now >= board_at) return std::nullopt;
  Clock::time_point until = board_at;
  if (held) {
    // A caller runs operations: nothing to take until it lets go, and what it leaves queued
    // then, release() hands over. While callers keep their operations, park (see the top).
    if (now < linger_until_) until = std::min(until, now + kParked);
  } else if (queued > 0) {
    // One operation left to its caller (help) until its grace ends; a second one queued
    // means the caller did not wait for the first.
    if (queued > 1 || now >= grace_until_) return std::nullopt;
    until = std::min(until, now + tick_);
  } else if (now < linger_until_) {
    until = std::min(until, now + tick_);
  }
  return until;
}

}  // namespace braid
