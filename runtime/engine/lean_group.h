// runtime/engine/lean_group.h - the kept runs of a small send/recv group, driven together: the
// LinkWork of GroupRunner's lean path (on a caller's thread, as a send/recv loop runs it, or on
// the progress thread: a group never streams, so the two are alike).
//
// A group's members are all known before it starts and nothing joins them, so the runs, their
// order and what has started fit in a few fixed slots beside the drive: no lists built and
// emptied per group, no hook before each pass. The rule is RunSet's: runs[i] starts once
// runs[after[i]] is done (after[i] < i), or at once when after[i] is -1 (two members with the
// same peer and direction keep their order), and every started run posts what it can on each
// pass. It checks and words its stops as RunSet does (run_checks.h): a RunSet holding the same
// runs would stop at the same points with the same messages.
//
// Threading: the thread that holds the engine (op_queue.h).
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/engine/op_label.h"
#include "runtime/engine/op_run.h"
#include "runtime/engine/run_checks.h"
#include "runtime/engine/run_order.h"
#include "runtime/links/peer_links.h"

namespace braid {

class LeanGroup final : public LinkWork {
 public:
  // The most members a lean group holds: a send and a receive to each of two peers (a ring's
  // or a halo's step). Larger groups take RunSet's path.
  static constexpr size_t kMaxRuns = 4;

  // runs[0..n) and after[0..n) are copied; every other reference outlives this.
  LeanGroup(OpRun* const* runs, const int* after, size_t n, const OpLabel& what, const Deadline& deadline,
            RunContext ctx);

  // Defined here: PeerLinks::drive_known calls them directly on every pass.
  bool done() const override { return run_order::all_done(runs_, started_, n_); }
  Status advance() override { return run_order::advance(runs_, after_, started_, n_); }
  Status on_completion(const transport::Completion& c, bool* ours) override {
    return run_order::on_completion(runs_, n_, c, ours, checks_);
  }
  Status check(Clock::time_point now) override {
    RETURN_IF_ERROR(checks_.aborted(what_));
    if (now >= deadline_.at()) return run_order::timed_out(runs_, started_, n_, what_, checks_);
    return checks_.board(now);
  }
  void dropped(const transport::Completion& c) override { checks_.dropped(what_, c); }
  Status poll_failed(Status s) override { return checks_.poll_failed(what_, std::move(s)); }

 private:
  std::array<OpRun*, kMaxRuns> runs_{};
  std::array<int, kMaxRuns> after_{};
  std::array<bool, kMaxRuns> started_{};
  size_t n_;
  const OpLabel& what_;
  const Deadline& deadline_;
  RunChecks checks_;
};

}  // namespace braid
