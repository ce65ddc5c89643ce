#include "runtime/engine/op_runner.h"

namespace braid {

void OpRunner::run_one(PendingOp& op, bool may_stream) {
  if (!op.group.empty()) {
    group_.run(op);
    return;
  }
  stream_.run(op, may_stream);
}

void OpRunner::run_here(PendingOp& op) {
  queue_.count_on_caller();
  run_one(op);
  queue_.release();
}

void OpRunner::help(const detail::WorkState& work, int64_t waited) {
  PendingOp* op = queue_.take_for_wait(work, waited);
  if (op == nullptr) return;
  queue_.count_on_caller();
  run_one(*op);
  queue_.done_in_slot();  // before the engine goes back: the slot is then no longer this thread's
  queue_.release();
}

}  // namespace braid
