// runtime/engine/hand_off.h - who runs an *_async operation queued on an idle communicator: the
// caller's thread or the progress thread.
//
// A program either waits for such an operation at once (`_async(...).wait()`, a benchmark, a
// latency-bound loop), and it should run on the caller's thread as the blocking call does, or
// computes meanwhile, and the progress thread should start it at once. HandOff predicts which
// from the last such operation:
//   - the caller waited for it at once (CommunicatorConfig::waits_at_once): the next one is
//     left to the caller, without waking the progress thread, which instead looks at the queue
//     every tick (CommunicatorConfig::hand_off_tick) for a while (kLinger) and takes an
//     operation left there over a tick;
//   - the caller waited later (it computed meanwhile), the progress thread had to take it, or
//     more were queued first: the next one wakes the progress thread at once, as every
//     operation did before, so that it overlaps the caller's compute.
// Waking the progress thread races with the caller's wait(), and the woken thread often wins:
// the caller then pays a wake-up to learn the operation is done, and the transport a change of
// owner each way (an io_uring ring is replaced). Ticks instead of a short timer: arming a timer
// due within about a millisecond is costly on virtual machines (docs/performance.md). Work
// queued behind other work gets no hand-off and streams on the progress thread.
//
// While a caller holds the engine (it runs an operation itself) a tick can take nothing, and a
// tick that lands then costs the caller's CPU a wake-up and two thread switches (where a rank
// has one CPU, the progress thread preempts the caller mid-operation). So a progress thread that
// finds the engine held while callers keep their operations parks instead: it looks again only
// after kParked (or when the board is due, or when work is queued behind the caller's, which
// release() hands it), and an operation left to its caller meanwhile does not wake it. The
// price: an operation that a caller in such a run leaves queued and does not wait for (the
// prediction was wrong) starts up to kParked and a tick late instead of a tick (see below),
// once; its caller then counts as computing.
//
// No exact clock read on the caller's side in a steady `_async(...).wait()` loop: whether the
// caller waited at once is a span of CycleClock counts (common/cycle_clock.h), and the times the
// progress thread keeps (the grace of an operation left to its caller, the linger) start at its
// own next look at the queue, from the clock it reads then anyway. So the grace of an operation
// left while the progress thread ticks ends between one and two ticks after it was queued, and
// one left while it is parked ends a tick after the park.
//
// Not thread-safe: the op queue's lock (op_queue.h) guards it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "common/cycle_clock.h"
#include "common/deadline.h"
#include "runtime/work_state.h"

namespace braid {

class HandOff {
 public:
  // For this long after an operation was left to its caller, the idle progress thread looks at
  // the queue every tick rather than sleeping until it is woken.
  static constexpr auto kLinger = std::chrono::milliseconds(50);
  // How long a progress thread that found a caller running operations sleeps before it looks
  // again (it is not woken for an operation left to a caller meanwhile; see the top).
  static constexpr auto kParked = std::chrono::milliseconds(20);

  // `enabled`: BRAID_CALLER_PROGRESS with a positive tick.
  HandOff(bool enabled, std::chrono::microseconds tick, std::chrono::microseconds waits_at_once)
      : enabled_(enabled), tick_(tick), waits_at_once_(enabled ? CycleClock::span(waits_at_once) : 0) {}

  // `work`'s operation was just queued; `idle_before`: nothing was queued or running. Returns
  // whether the progress thread must be woken.
  bool queued(bool idle_before, const std::shared_ptr<detail::WorkState>& work);
  // The caller came to wait for `work` before it completed (Work::wait: WorkRunner::help), at
  // `waited` (CycleClock; 0: not read).
  void waited(const detail::WorkState& work, int64_t waited);
  // The caller took the operation left to it from the queue's engine slot, without the queue's
  // lock, `span` CycleClock counts after it was returned to it (op_queue.h passes that on before
  // the next queued()): settles the prediction as waited() does.
  void took_in_slot(int64_t span);
  // The progress thread takes the queue's front, `front`: when it was the operation left to its
  // caller, the caller did not come for it in time (or queued more first), and the next starts
  // at once; unless the caller's wait, which may come after it finished, shows it waited at
  // once all the same (the next queued() reads its time then).
  void taken_by_progress(const std::shared_ptr<detail::WorkState>& front);
  // The caller took the operation left to it (under the queue's lock; queued() assumes as much
  // when it was taken without).
  void taken_by_caller() {
    grace_until_ = {};
    grace_unset_ = false;
  }

  // The idle progress thread's look at the queue at `now`, and its next wake-up: `queued`
  // operations waiting, `held`: another thread (a caller) holds the engine; nothing when it
  // should not sleep: the board is due at `board_at`, more than one is queued, or the one
  // queued is past its grace. Never a wait shorter than a tick: a timer due sooner is costly to
  // arm. An operation left to its caller since the last look starts its grace and the linger
  // from `now`.
  std::optional<Clock::time_point> sleep_until(Clock::time_point now, Clock::time_point board_at, size_t queued,
                                               bool held = false);
  // Around the progress thread's sleep: while it sleeps, queued() knows when it wakes by itself
  // and whether it parked behind a caller (`held` as given to sleep_until, `until` as it
  // returned after its look).
  void sleeping(Clock::time_point until, bool held = false) {
    progress_wakes_at_ = until;
    parked_ = held;
    wakes_soon_ = looked_at_ != Clock::time_point::min() &&
                  until - looked_at_ <= (held ? std::chrono::microseconds(kParked) : tick_);
  }
  void awake() {
    progress_wakes_at_ = Clock::time_point::min();
    parked_ = false;
  }

 private:
  const bool enabled_;
  const std::chrono::microseconds tick_;
  const int64_t waits_at_once_;  // in CycleClock counts
  // idle_work_ identifies (never dereferenced) the last operation queued on an idle
  // communicator; callers_wait_ is the prediction.
  const detail::WorkState* idle_work_ = nullptr;
  bool callers_wait_ = true;
  // When that operation went back to its caller and when the caller first waited for it
  // (WorkState::wait_times), kept once the progress thread took it (taken_by_progress); null
  // otherwise, and once a wait before completion (help) has settled it.
  std::shared_ptr<detail::WorkState::WaitTimes> idle_times_;
  Clock::time_point grace_until_{};   // the only queued operation is left to its caller until then
  Clock::time_point linger_until_{};  // until then the idle progress thread ticks
  // Set by queued() when it leaves an operation to its caller; the progress thread's next look
  // (sleep_until) turns them into grace_until_ and linger_until_ from the time it read.
  bool grace_unset_ = false;
  bool linger_unset_ = false;
  Clock::time_point looked_at_ = Clock::time_point::min();  // the progress thread's last look
  // When the progress thread's wait ends by itself; time_point::min() while it is not waiting
  // (it looks at the queue before it waits again).
  Clock::time_point progress_wakes_at_ = Clock::time_point::min();
  bool parked_ = false;  // it sleeps because a caller held the engine (see the top)
  // Its sleep ends within a tick (within kParked when parked) of the look before it: it looks at
  // the queue in time for an operation left to a caller without being woken.
  bool wakes_soon_ = false;
};

}  // namespace braid
