#include "runtime/engine/op_runner.h"

#include <optional>

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
  if (op.group.empty()) {
    queue_.release();
    return;
  }
  op.group.clear();  // the members' Works are complete: their lists' room goes to the next group
  queue_.release(nullptr, &op.group);
}

void OpRunner::help(const detail::WorkState& work, int64_t waited) {
  std::optional<PendingOp> op;  // built only when taken
  if (queue_.take_for_wait(work, waited, &op)) run_here(*op);
}

}  // namespace braid
