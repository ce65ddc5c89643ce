// runtime/engine/run_set.h - operations' runs driven together on the links.
//
// The LinkWork that the stream and group runners hand to PeerLinks::drive: runs[i] starts once
// runs[after[i]] is done (after[i] < i), or at once when after[i] is -1, and every started run
// posts what it can on each pass. `between`, called before each pass, may append to the runs
// and change the label and deadline it was given (a stream follows its oldest unfinished
// operation), so both are held by reference. Each check is run_checks.h's: an abort, the
// deadline and, once a second, the failure board.
#pragma once

#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/function_ref.h"
#include "common/status.h"
#include "runtime/engine/op_label.h"
#include "runtime/engine/op_run.h"
#include "runtime/engine/run_checks.h"
#include "runtime/links/peer_links.h"

namespace braid {

class RunSet final : public LinkWork {
 public:
  static constexpr auto kBoardInterval = RunChecks::kBoardInterval;
  using Context = RunContext;

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
  const std::vector<OpRun*>& runs_;
  const std::vector<int>& after_;
  std::vector<bool>& started_;
  const OpLabel& what_;
  const Deadline& deadline_;
  FunctionRef<void()> between_;
  RunChecks checks_;
};

}  // namespace braid
