// runtime/engine/run_checks.h - what a running operation checks before each poll of the drive,
// and how it words why it stopped: shared by RunSet (runs driven together) and LoneRun (one
// kept run on the caller's thread), so both stop for the same reasons with the same messages.
//
// Each check looks for an abort, then the deadline, then, once per kBoardInterval, the failure
// board.
//
// Threading: the thread that drives the operation (the one holding the engine, op_queue.h).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/engine/op_label.h"
#include "runtime/failure/comm_failure.h"
#include "runtime/failure/failure_board.h"
#include "transport/transport.h"

namespace braid {

// What a running operation reports to and reads from its communicator; every pointer outlives
// the work it is given to.
struct RunContext {
  int rank = 0;
  double timeout_s = 0;                       // BRAID_TIMEOUT_S, for the timeout message
  CommFailure* failure = nullptr;             // an abort, the board, the first peer that failed
  std::optional<Failure>* adopted = nullptr;  // set when the board names a failure
};

class RunChecks {
 public:
  // How often a waiting operation (and the idle progress thread) reads the failure board: one
  // store round trip per second of waiting, never one per operation.
  static constexpr auto kBoardInterval = std::chrono::seconds(1);

  explicit RunChecks(RunContext ctx) : ctx_(ctx) {}

  // Non-OK when `what` must stop: an abort on this rank, or (once per interval, from the first
  // call) a failure the board names. The deadline is the caller's to test between the two, as
  // only it can say what it was waiting for (timeout()).
  Status aborted(const OpLabel& what) const {
    if (!ctx_.failure->abort_requested()) return Status::ok();
    return Status(ErrorCode::aborted, what.str() + me() + ": aborted on this rank");
  }
  Status board(Clock::time_point now) {
    if (next_board_check_ == Clock::time_point{}) {  // the first check: the interval starts
      next_board_check_ = now + kBoardInterval;
      return Status::ok();
    }
    return now < next_board_check_ ? Status::ok() : read_board(now);
  }
  // The deadline passed while `name` (the run not finished) waited for `waiting`.
  Status timeout(const OpLabel& what, const std::string& name, const std::string& waiting) const;
  // A completion a run refused with `s`: which peer is gone, for the failure report (our own
  // close() completes as aborted).
  void note_refused(const transport::Completion& c) const {
    if (!c.status.is_ok() && c.status.code() != ErrorCode::aborted && c.connection != nullptr) {
      ctx_.failure->note_failed_peer(c.connection->peer_rank());
    }
  }
  void dropped(const OpLabel& what, const transport::Completion& c) const;
  Status poll_failed(const OpLabel& what, Status s) const { return s.with_context(what.str() + me() + ": "); }

 private:
  // The board is due: reads it, and sets the time of the next read.
  Status read_board(Clock::time_point now);
  // " on rank N", built only for a message: every operation runs through a check.
  std::string me() const { return " on rank " + std::to_string(ctx_.rank); }

  RunContext ctx_;
  Clock::time_point next_board_check_{};  // set at the first check, from its clock read
};

}  // namespace braid
