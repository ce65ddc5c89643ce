// runtime/engine/run_set.h - operations' runs driven together on the links.
//
// The LinkWork that the stream and group runners hand to PeerLinks::drive: runs[i] starts once
// runs[after[i]] is done (after[i] < i), or at once when after[i] is -1, and every started run
// posts what it can on each pass. `between`, called before each pass, may append to the runs
// and change the label and deadline it was given (a stream follows its oldest unfinished
// operation), so both are held by reference. Each check looks for an abort, the deadline and,
// once a second, the failure board.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/function_ref.h"
#include "common/status.h"
#include "runtime/engine/op_label.h"
#include "runtime/engine/op_run.h"
#include "runtime/failure/comm_failure.h"
#include "runtime/failure/failure_board.h"
#include "runtime/links/peer_links.h"

namespace braid {

class RunSet final : public LinkWork {
 public:
  // How often a waiting operation (and the idle progress thread) reads the failure board: one
  // store round trip per second of waiting, never one per operation.
  static constexpr auto kBoardInterval = std::chrono::seconds(1);

  // What a RunSet reports to and reads from its communicator; every pointer outlives it.
  struct Context {
    int rank = 0;
    double timeout_s = 0;                       // BRAID_TIMEOUT_S, for the timeout message
    CommFailure* failure = nullptr;             // an abort, the board, the first peer that failed
    std::optional<Failure>* adopted = nullptr;  // set when the board names a failure
  };

  // `started` is the caller's list, reused across calls to spare an allocation per operation.
  RunSet(const std::vector<OpRun*>& runs, const std::vector<int>& after, std::vector<bool>& started,
         const OpLabel& what, const Deadline& deadline, FunctionRef<void()> between, Context ctx);

  bool done() const override;
  Status advance() override;
  Status on_completion(const transport::Completion& c, bool* ours) override;
  Status check(Clock::time_point now) override;
  void dropped(const transport::Completion& c) override;
  Status poll_failed(Status s) override;

 private:
  // " on rank N", built only for a message: a RunSet runs for every operation.
  std::string me() const { return " on rank " + std::to_string(ctx_.rank); }
  std::string waiting_for() const;
  Status timed_out() const;

  const std::vector<OpRun*>& runs_;
  const std::vector<int>& after_;
  std::vector<bool>& started_;
  const OpLabel& what_;
  const Deadline& deadline_;
  FunctionRef<void()> between_;
  Context ctx_;
  Clock::time_point next_board_check_{};  // set at the first check, from its clock read
};

}  // namespace braid
