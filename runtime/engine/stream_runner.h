// runtime/engine/stream_runner.h - one operation, plus (on the progress thread) the ones queued
// behind it, overlapped.
//
// The next operation starts as soon as the newest has posted every send and receive, so its
// messages queue behind those on each connection, which is all the in-order matching of
// connections needs. The tail of one operation (its last segments crossing the ring) then
// overlaps the head of the next. Timeouts and failures are reported against the oldest
// unfinished operation.
//
// On a caller's thread (or wherever streaming is not allowed) there is no stream to overlap, and
// one operation of a shape run before takes a lean path: its kept run (run_cache.h) is run again
// and driven alone (lone_run.h), then completed and kept again, without the stream's lists and
// its work before each pass. Everything else (an operation prepared anew, a GPU buffer, a
// communicator that failed) takes the stream's path, which is written for the general case.
//
// Threading: only the thread that holds the engine (op_queue.h); run() is never re-entered;
// lean_runs() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/communicator_config.h"
#include "runtime/engine/held_completions.h"
#include "runtime/engine/op_label.h"
#include "runtime/engine/op_queue.h"
#include "runtime/engine/pending_op.h"
#include "runtime/engine/run_factory.h"
#include "runtime/failure/comm_failure.h"
#include "runtime/links/comm_links.h"

namespace braid {

class StreamRunner {
 public:
  // At most this many operations in one run() (the completions of all of them are matched
  // against each run), after which the stream drains and the loop takes the next.
  static constexpr size_t kMaxStream = 16;

  // Every reference outlives this.
  StreamRunner(const CommunicatorConfig& cfg, OpQueue& queue, HeldCompletions& held, CommFailure& failure,
               RunFactory& runs, CommLinks& links)
      : cfg_(cfg), queue_(queue), held_(held), failure_(failure), runs_(runs), links_(links) {}

  // Runs `first` (which stays the caller's). may_stream: operations queued behind it may be
  // taken and overlapped with it (not inside a group, whose members must run as the group says;
  // and only on the progress thread: a caller running its own blocking call returns with it).
  void run(PendingOp& first, bool may_stream);

  // For tests: operations that took the lean path (see the top) so far.
  uint64_t lean_runs() const { return lean_runs_.load(std::memory_order_relaxed); }

 private:
  struct StreamOp {
    PendingOp& op;                     // run()'s `first` (the caller's), or *taken
    std::unique_ptr<PendingOp> taken;  // an operation taken from the queue
    OpLabel what;
    std::unique_ptr<OpRun> run;
    Deadline deadline;
    std::chrono::steady_clock::time_point started;
    std::optional<RunShape> shape;  // kept for reuse when it finishes, if set
    bool completed = false;
  };
  // The lean path: false when `op` has no kept run to take (or is not of the kinds it serves),
  // and nothing was done; true when `op` ran and completed.
  bool run_kept(PendingOp& op);
  // Prepares `op` and adds it to the stream; an operation with nothing to move completes at
  // once, one that failed to prepare completes with its error (nothing was sent: the
  // communicator stays usable).
  void admit(PendingOp& op, std::unique_ptr<PendingOp> taken);
  // Completes the operations whose runs are done, in order, and moves the label and deadline on
  // to the oldest unfinished one. last: the drive has returned, nothing of this stream is left
  // running (HeldCompletions::complete_last).
  void complete_finished(bool last);
  // Before each pass of the drive: completes what finished, then takes the next queued
  // operation once the newest has posted everything.
  void between();
  // How an operation that ran without error ends: its result copied back to the GPU, if any.
  static Status finish_device(PendingOp& op, const Deadline& deadline, const OpLabel& what);

  const CommunicatorConfig& cfg_;
  OpQueue& queue_;
  HeldCompletions& held_;
  CommFailure& failure_;
  RunFactory& runs_;
  CommLinks& links_;
  // The stream's working lists, kept across calls to spare allocations; emptied on every way
  // out of run(), which ends what they hold (the operations taken from the queue, the runs not
  // kept) as local lists would. Never more than kMaxStream, so references into active_ stay
  // valid as it grows.
  std::vector<StreamOp> active_;
  std::vector<OpRun*> run_ptrs_;
  std::vector<int> after_;
  std::vector<bool> started_;
  bool may_stream_ = false;
  // The oldest unfinished operation: the one a timeout or failure is reported against.
  OpLabel what_;
  Deadline deadline_ = Deadline::never();
  uint64_t seq_ = 0;
  size_t oldest_ = 0;
  std::atomic<uint64_t> lean_runs_{0};
};

}  // namespace braid
