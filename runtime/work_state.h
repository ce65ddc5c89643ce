// runtime/work_state.h - the shared state behind a braid::Work.
//
// Completion is an event: the progress thread calls complete() once; waiters spin briefly (a
// blocking wake-up costs far more than a short spin) and then sleep on the done word itself (a
// futex) until it completes or their deadline passes. No lock: the outcome is written once,
// before the done word, and complete() makes a system call only when someone sleeps, so an
// operation its caller ran (the common case for a small one) costs a store and a load here.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/deadline.h"
#include "common/status.h"

namespace braid::detail {

struct WorkState;

// What Work::wait() asks of the engine that queued its operation: to run it on the waiting
// thread when nothing else is queued or running (BRAID_CALLER_PROGRESS). Returns at once
// otherwise (the progress thread has it). `waited`: when the wait began, in CycleClock counts
// (WorkState::note_wait), 0 if it did not read the counter.
class WorkRunner {
 public:
  virtual void help(const WorkState& work, int64_t waited) = 0;

 protected:
  ~WorkRunner() = default;
};

struct WorkState {
  // Called once by the thread that finished the operation.
  void complete(Status s);
  // Waits until complete() or the deadline; true when complete. Spins for `spin_us` first.
  bool wait_until(Deadline deadline, int spin_us) const;
  bool done() const { return done_.load(std::memory_order_acquire) != 0; }
  // The outcome once done(); OK before.
  const Status& status() const;

  // Issued inside group_start()/group_end() and the group not ended yet: waiting would hang.
  std::atomic<bool> in_open_group{false};
  // Set when the caller may run the operation itself (BRAID_CALLER_PROGRESS): a waiter asks it
  // to. Only read while the operation is not done, i.e. while the communicator is alive (its
  // destructor completes every queued operation first).
  WorkRunner* runner = nullptr;
  // Set (before the Work is handed out) on an operation queued on an idle communicator: when its
  // *_async call returned it to the caller and when the caller first came to wait, in
  // CycleClock counts (common/cycle_clock.h; 0 until then): only the span between them counts. Shared with the communicator, which reads them when
  // it queues the next such operation: the progress thread may have finished this one before
  // the caller waited, so that the wait had nothing to hand over. The time in between is the
  // caller's own; the wake-up of the progress thread before the return is not.
  // The communicator keeps them through a pointer that shares this state's ownership.
  struct WaitTimes {
    std::atomic<int64_t> returned{0};
    std::atomic<int64_t> first_wait{0};
  };
  mutable WaitTimes wait_times;
  bool timed = false;  // wait_times is kept (set before the Work is handed out)
  void note_returned() const;
  // Returns the count it read (CycleClock), 0 when not timed.
  int64_t note_wait() const;
  // Runs once, after complete(), or at destruction if complete() never ran; set before the Work
  // is handed out. Releases the caller's CUDA stream held for a device-buffer operation.
  std::function<void()> on_done;
  ~WorkState();

 private:
  std::atomic<int> done_{0};          // 1 once complete() wrote status_; the word waiters sleep on
  mutable std::atomic<int> sleepers_{0};  // waiters asleep on done_ (or about to be)
  Status status_;
};

// A WorkState for a new operation. Its memory (with the shared_ptr's count) comes from a few
// blocks that operations finished on this thread gave back, else from the heap: a small
// operation's caller makes one and lets go of one per operation. (Plain heap blocks under
// AddressSanitizer, which then sees every use after the last owner let go.)
std::shared_ptr<WorkState> make_work_state();

}  // namespace braid::detail
