#include "runtime/engine/run_checks.h"

#include "common/log.h"

namespace braid {

Status RunChecks::read_board(Clock::time_point now) {
  if ((*ctx_.adopted = ctx_.failure->board().read())) return Status((*ctx_.adopted)->code, (*ctx_.adopted)->message);
  next_board_check_ = now + kBoardInterval;
  return Status::ok();
}

Status RunChecks::timeout(const OpLabel& what, const std::string& name, const std::string& waiting) const {
  return timeout_error(what.str() + " (" + name + me() + ") did not finish within " +
                       std::to_string(static_cast<int>(ctx_.timeout_s)) + " s (BRAID_TIMEOUT_S); waiting for " +
                       waiting);
}

void RunChecks::dropped(const OpLabel& what, const transport::Completion& c) const {
  BRAID_LOG(trace) << what.str() << me() << ": dropped a completion of another operation (cookie " << c.cookie << ")";
}

}  // namespace braid
