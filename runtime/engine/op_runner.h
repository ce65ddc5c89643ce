// runtime/engine/op_runner.h - runs a taken operation on the thread that holds the engine, and
// lets a waiting caller run its own (the WorkRunner a Work waits through).
//
// Threading: run_one() only by the thread that holds the engine (op_queue.h); help() from the
// thread waiting for a Work.
#pragma once

#include <cstdint>

#include "runtime/engine/group_runner.h"
#include "runtime/engine/op_queue.h"
#include "runtime/engine/pending_op.h"
#include "runtime/engine/stream_runner.h"
#include "runtime/work_state.h"

namespace braid {

class OpRunner final : public detail::WorkRunner {
 public:
  // Every reference outlives this.
  OpRunner(OpQueue& queue, StreamRunner& stream, GroupRunner& group) : queue_(queue), stream_(stream), group_(group) {}

  // Runs `op` (which stays the caller's): a group, or one operation that (with may_stream)
  // operations queued behind it may join.
  void run_one(PendingOp& op, bool may_stream = true);
  // The blocking call: runs `op` on the calling thread, which took the engine
  // (OpQueue::push_or_take), then gives the engine back.
  void run_here(PendingOp& op);
  // Work::wait(): when `work` is the only operation queued and none is running, runs it here, in
  // the queue's engine slot (op_queue.h).
  void help(const detail::WorkState& work, int64_t waited) override;

 private:
  OpQueue& queue_;
  StreamRunner& stream_;
  GroupRunner& group_;
};

}  // namespace braid
