// runtime/engine/group_runner.h - a group's operations (group_start() ... group_end()), run as
// one unit.
//   - only send/recv: all run at once (each rank may send to one peer while it receives from
//     another, which one at a time would deadlock); two with the same peer and direction keep
//     their order. A small group whose members all have kept runs (a send/recv loop, from its
//     second step) runs them where the cache keeps them, in a LeanGroup (lean_group.h), without
//     the lists a larger or new group builds;
//   - only all_reduce, one dtype and op: coalesced into one all_reduce over a staging buffer
//     (one latency for many small tensors);
//   - anything else: one after the other, as if there were no group.
//
// Threading: only the thread that holds the engine (op_queue.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/communicator_config.h"
#include "runtime/engine/held_completions.h"
#include "runtime/engine/op_label.h"
#include "runtime/engine/pending_op.h"
#include "runtime/engine/run_factory.h"
#include "runtime/engine/stream_runner.h"
#include "runtime/failure/comm_failure.h"
#include "runtime/links/comm_links.h"

namespace braid {

class GroupRunner {
 public:
  // Every reference outlives this.
  GroupRunner(const CommunicatorConfig& cfg, StreamRunner& stream, HeldCompletions& held, CommFailure& failure,
              RunFactory& runs, CommLinks& links)
      : cfg_(cfg), stream_(stream), held_(held), failure_(failure), runs_(runs), links_(links) {}

  // `group`'s members (group.group) all complete, and then `group`'s own Work.
  void run(PendingOp& group);
  // For tests and TRACE: send/recv groups run on the lean path (run_lean) so far.
  uint64_t lean_groups() const { return lean_groups_.load(std::memory_order_relaxed); }

 private:
  void finish(PendingOp& group, const Status& s);
  // A member run by itself: its result is read at once, so its completion is not held.
  void run_member(PendingOp& m);
  void run_coalesced(PendingOp& group, const OpLabel& what);
  void run_in_turn(PendingOp& group);
  void run_p2p(PendingOp& group, const OpLabel& what);
  // The lean path of run_p2p: false (and nothing done) unless every member's run is kept.
  bool run_lean(PendingOp& group, const OpLabel& what);
  // Builds the members' runs into built_/run_ptrs_/after_; non-OK when one failed to prepare.
  Status build_p2p(std::vector<PendingOp>& members, const OpLabel& what, collectives::RunOptions& options);

  const CommunicatorConfig& cfg_;
  StreamRunner& stream_;
  HeldCompletions& held_;
  CommFailure& failure_;
  RunFactory& runs_;
  CommLinks& links_;
  // run_p2p()'s runs, kept across calls to spare allocations (each call empties them on every
  // way out).
  struct GroupRun {
    OpRun* run;                      // owned, or lent by the run cache
    std::unique_ptr<OpRun> owned;    // a run prepared anew (or taken), null when lent
    std::optional<RunShape> shape;   // kept for reuse when it finishes, if set
    PendingOp* member;
  };
  // After the drive: the lent runs go back to the cache (run again later, or dropped), and the
  // runs prepared anew are kept when `ok` and of a shape worth keeping.
  void return_runs(bool ok);
  std::vector<GroupRun> built_;
  std::vector<OpRun*> run_ptrs_;
  std::vector<int> after_;
  std::vector<bool> started_;
  std::atomic<uint64_t> lean_groups_{0};
};

}  // namespace braid
