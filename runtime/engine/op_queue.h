// runtime/engine/op_queue.h - a communicator's operations in issue order, and who may run them.
//
// Callers enqueue and get a Work. A blocking call (or Work::wait()) whose communicator has
// nothing else queued or running runs the operation on the caller's own thread instead
// (BRAID_CALLER_PROGRESS): waking the progress thread and then the caller again costs two
// scheduler wake-ups per operation (docs/performance.md has what they cost). Exactly one thread
// at a time runs operations and touches the transport: the one that holds the engine (engine_,
// taken by push_or_take, take_for_wait or next_turn and given back by release). The transport
// follows it (an io_uring ring changes owner only while no I/O is in flight, which holds
// between operations: a send completes only after its zero-copy notification). An *_async
// operation queued on an idle communicator goes through the hand-off (hand_off.h).
//
// The engine's slot. An operation queued on an idle communicator (with caller progress) waits
// in one slot of its own, slot_, rather than in the fifo, and the engine word names it (its
// WorkState's address). Whoever turns that word into kHeld with one compare-exchange runs it:
// its caller in Work::wait() without taking mu_, or the progress thread (under mu_) once the
// hand-off's grace is over or more work came. So a caller that issues and at once waits takes
// mu_ once per operation (to admit it), not three times, and gives the engine back without it
// when nothing else is queued (release()): a store to the engine word, then a look at the
// fifo's size, which producers set after they read the engine word (both sequentially
// consistent: either the releaser sees the new operation and wakes the progress thread, or the
// producer sees the engine free, or held and wakes the progress thread itself, which then finds
// it free). slot_ belongs to the engine's holder; it is filled under mu_ only while the engine
// is free, and read under mu_ only while the word names it.
//
// Admission numbers every operation alike on every rank (seq, and match_seq for op_header.h),
// refuses new ones once the communicator failed or is aborting, and holds those issued inside
// group_start()/group_end() until the group ends. A group's members are held without mu_ (under
// group_lock_, a spin on one word held for an append) and numbered, in the order they came, when
// the group ends under mu_: while a group is open every operation joins it, so the numbers are
// those admission one by one would give. A send/recv pair then takes mu_ once, at group_end.
//
// Threading: every method from any thread; mu_ guards what it says.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "braid/work.h"
#include "common/mutex.h"
#include "runtime/communicator_config.h"
#include "runtime/engine/hand_off.h"
#include "runtime/engine/op_fifo.h"
#include "runtime/engine/pending_op.h"
#include "runtime/failure/comm_failure.h"

namespace braid {

class OpQueue {
 public:
  // `runner` is what a waiting caller asks to run its operation (set on every Work when callers
  // may run operations); every reference outlives the queue.
  OpQueue(const CommunicatorConfig& cfg, const CommFailure& failure, detail::WorkRunner* runner);
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // *_async: queues the operation (or holds it in the open group) and returns its Work.
  Work push(collectives::CollectiveArgs&& args, std::shared_ptr<detail::WorkState> work,
            std::unique_ptr<DeviceStaging> device) EXCLUDES(mu_);
  // The blocking call: true when the caller runs `*op` itself now (it then holds the engine and
  // calls release() after); false when it was queued, held or refused (its Work says).
  bool push_or_take(collectives::CollectiveArgs&& args, const std::shared_ptr<detail::WorkState>& work,
                    std::unique_ptr<DeviceStaging> device, PendingOp* op) EXCLUDES(mu_);
  // Work::wait(): when `work`'s operation is the only one queued and none runs, the engine's
  // slot holding it: the caller then holds the engine, runs it there and calls done_in_slot()
  // then release(). Null otherwise.
  PendingOp* take_for_wait(const detail::WorkState& work, int64_t waited) EXCLUDES(mu_) {
    // The common case: `work`'s operation waits in the engine's slot and nothing is queued
    // behind it. No lock: how soon its caller came for it goes to the hand-off when the next
    // one is queued (queued()). With operations queued behind it the caller does not take it:
    // run alone, it could wait for a peer that waits for one of those (a receive posted before
    // a send, both ranks alike); the progress thread, which the push behind it woke, runs them
    // overlapped (stream_runner.h).
    uintptr_t mine = word_of(&work);
    if (engine_.load(std::memory_order_relaxed) == mine && waiting_.load(std::memory_order_seq_cst) == 0 &&
        engine_.compare_exchange_strong(mine, kHeld, std::memory_order_seq_cst, std::memory_order_relaxed)) {
      if (waited != 0) {
        slot_wait_span_.store(waited - work.wait_times.returned.load(std::memory_order_relaxed),
                              std::memory_order_relaxed);
      }
      return &slot_;
    }
    return take_for_wait_locked(work, waited);
  }
  // After an operation taken by take_for_wait() ran: drops what the slot holds of it, keeping
  // a group's member list (emptied) for the next group. Only by the engine's holder.
  void done_in_slot() {
    slot_.work.reset();
    slot_.device.reset();
    slot_.group.clear();  // its room serves the next group (close_group swaps it in)
  }
  // A pipelined device operation (device_staging.h): its chunks queued as operations, in order.
  Work push_chunks(DeviceStaging& staged, const std::shared_ptr<detail::WorkState>& work) EXCLUDES(mu_);

  // Operations pushed between open_group() and close_group() run as one unit (group_runner.h).
  void open_group() EXCLUDES(mu_);
  Work close_group() EXCLUDES(mu_);
  bool group_open() EXCLUDES(mu_);

  // The progress thread's turn: waits (under the lock) until there is something to do or
  // `board_at`, then takes the engine unless another thread holds it.
  enum class Turn {
    elsewhere,  // another thread runs operations (it watches the board, and hands back what it leaves)
    run,        // *op was taken: run it, then release()
    idle,       // nothing queued: look at the board, then release()
    stop,       // stopping and everything queued has run: the engine stays taken
  };
  Turn next_turn(Clock::time_point board_at, std::optional<PendingOp>* op) EXCLUDES(mu_);
  // A stream's next operation, taken by the engine's holder: the queue's front when it is no
  // group, no abort is pending and its GPU input is ready; null otherwise.
  std::unique_ptr<PendingOp> take_next_for_stream() EXCLUDES(mu_);
  // Gives the engine back (and wakes the progress thread when it has work); *dequeued, when
  // given, gets how many queued operations have left the queue so far. Without `dequeued` and
  // with nothing queued, stopping or aborting, it takes no lock (see the top).
  void release(uint64_t* dequeued = nullptr) EXCLUDES(mu_) {
    engine_.store(kFree, std::memory_order_seq_cst);
    // Nothing to hand over: no lock (see the top).
    if (dequeued == nullptr && waiting_.load(std::memory_order_seq_cst) == 0 &&
        !stopping_.load(std::memory_order_seq_cst) && !failure_.abort_requested()) {
      return;
    }
    hand_over(dequeued);
  }
  // Operations ever queued: lets the progress thread spin on new work without the lock.
  uint64_t enqueued() const { return enqueued_.load(std::memory_order_acquire); }

  // abort(): everything queued or held in an open group, taken out; then wake_all() wakes the
  // progress thread.
  std::vector<PendingOp> cancel_all() EXCLUDES(mu_);
  void wake_all();
  // The destructor's: the progress thread ends once everything queued has run.
  void stop() EXCLUDES(mu_);

  // For tests and TRACE: operations (a group counts once) run so far on a caller's thread
  // (blocking calls, wait()) and on the progress thread, and how often the idle progress thread
  // woke from its wait on the queue (woken, or its tick or park ended).
  struct HandOffCounts {
    uint64_t on_caller = 0;
    uint64_t on_progress_thread = 0;
    uint64_t progress_wakeups = 0;
  };
  HandOffCounts counts() const {
    return {ran_on_caller_.load(std::memory_order_relaxed), ran_on_progress_.load(std::memory_order_relaxed),
            progress_wakeups_.load(std::memory_order_relaxed)};
  }
  void count_on_caller() { ran_on_caller_.fetch_add(1, std::memory_order_relaxed); }
  void count_on_progress() { ran_on_progress_.fetch_add(1, std::memory_order_relaxed); }

 private:
  // Numbers a new operation and fills `*out` (an empty PendingOp) with it, or, for an open group,
  // holds it (then `*out` is untouched). Returns false (and completes `work` with the reason)
  // when the communicator can no longer run it, or held it.
  bool admit(collectives::CollectiveArgs&& args, std::shared_ptr<detail::WorkState> work, PendingOp* out)
      REQUIRES(mu_);
  // Holds the operation in the open group (unnumbered: close_group numbers the members), moving
  // `args` and `work` there; false, with both untouched, when no group is open (callers look at
  // group_depth_ first).
  bool hold_in_group(collectives::CollectiveArgs&& args, std::shared_ptr<detail::WorkState>& work)
      EXCLUDES(group_lock_);
  // Gives `op` its numbers (see the top).
  void number(PendingOp& op) REQUIRES(mu_);
  bool refusing() const;  // the communicator failed or is aborting: admit() refuses new operations
  // After pushing `work`'s operation: the hand-off when the communicator was idle before.
  // Returns whether the progress thread must be woken.
  bool queued(bool idle_before, const std::shared_ptr<detail::WorkState>& work) REQUIRES(mu_);
  PendingOp* take_for_wait_locked(const detail::WorkState& work, int64_t waited) EXCLUDES(mu_);
  // release()'s end when something may be waiting for the engine: wakes the progress thread.
  void hand_over(uint64_t* dequeued) EXCLUDES(mu_);
  void wait_for_work(MutexLock& lock, Clock::time_point board_at) REQUIRES(mu_);
  void wake_progress();
  // The fifo's size for release()'s look, set after every change to it (see the top).
  void published() REQUIRES(mu_) { waiting_.store(queue_.size(), std::memory_order_seq_cst); }
  // The engine word: free, held, or the address of the WorkState of the operation in slot_.
  static constexpr uintptr_t kFree = 0;
  static constexpr uintptr_t kHeld = 1;
  static uintptr_t word_of(const detail::WorkState* w) { return reinterpret_cast<uintptr_t>(w); }
  // slot_ gets an operation to fill when the communicator is idle (and callers may run
  // operations); else a new last slot of the fifo.
  bool idle() const REQUIRES(mu_) { return engine_.load(std::memory_order_seq_cst) == kFree && queue_.empty(); }

  const CommunicatorConfig& cfg_;
  const CommFailure& failure_;
  detail::WorkRunner* const runner_;

  Mutex mu_;
  CondVar cv_;
  OpFifo queue_ GUARDED_BY(mu_);
  std::atomic<size_t> waiting_{0};        // queue_.size() (published)
  std::atomic<uintptr_t> engine_{kFree};  // kFree, kHeld or slot_'s operation (see the top)
  // Set by a caller that took its operation from the slot: CycleClock counts from its return
  // to the caller's wait (HandOff::took_in_slot); -1 once passed on.
  std::atomic<int64_t> slot_wait_span_{-1};
  PendingOp slot_;                        // the engine's slot (see the top)
  HandOff hand_off_ GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};     // set under mu_; release() reads it without
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  uint64_t collective_seq_ GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> p2p_send_seq_ GUARDED_BY(mu_);  // per peer: sends to it
  std::vector<uint64_t> p2p_recv_seq_ GUARDED_BY(mu_);  // per peer: receives from it
  // The open group's lock (see the top): taken after mu_ where both are held.
  class CAPABILITY("mutex") GroupLock {
   public:
    void lock() ACQUIRE() {
      while (held_.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
    }
    void unlock() RELEASE() { held_.store(false, std::memory_order_release); }

   private:
    std::atomic<bool> held_{false};
  };
  class SCOPED_CAPABILITY GroupGuard {
   public:
    explicit GroupGuard(GroupLock& lock) ACQUIRE(lock) : lock_(lock) { lock_.lock(); }
    ~GroupGuard() RELEASE() { lock_.unlock(); }
    GroupGuard(const GroupGuard&) = delete;
    GroupGuard& operator=(const GroupGuard&) = delete;

   private:
    GroupLock& lock_;
  };
  GroupLock group_lock_;
  // Open group_start() calls: changed under group_lock_, read without it for a first look (a
  // call issued on another thread at the same moment as group_start joins the group or not,
  // either way) and again under it.
  std::atomic<int> group_depth_{0};
  std::vector<PendingOp> group_ops_ GUARDED_BY(group_lock_);  // what the open group holds
  std::atomic<uint64_t> enqueued_{0};
  std::atomic<uint64_t> ran_on_caller_{0};
  std::atomic<uint64_t> ran_on_progress_{0};
  std::atomic<uint64_t> progress_wakeups_{0};
};

}  // namespace braid
