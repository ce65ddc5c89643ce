// runtime/engine/lone_run.h - one kept run driven by itself: the LinkWork of an operation that
// a caller runs on its own thread (StreamRunner's lean path).
//
// A caller's thread never streams, so nothing joins the run while it is driven: no list of runs,
// no order between them and no hook before each pass, which RunSet carries for the progress
// thread. It checks and words its stops as RunSet does (run_checks.h): a RunSet holding only
// this run would stop at the same points with the same messages.
//
// Threading: the thread that holds the engine (op_queue.h).
#pragma once

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/engine/op_label.h"
#include "runtime/engine/op_run.h"
#include "runtime/engine/run_checks.h"
#include "runtime/links/peer_links.h"

namespace braid {

class LoneRun final : public LinkWork {
 public:
  // Every reference outlives this.
  LoneRun(OpRun& run, const OpLabel& what, const Deadline& deadline, RunContext ctx)
      : run_(run), what_(what), deadline_(deadline), checks_(ctx) {}

  // Defined here: PeerLinks::drive_known calls them directly on every pass.
  bool done() const override { return started_ && run_.done(); }
  Status advance() override {
    if (!started_) {
      started_ = true;
      return run_.start();
    }
    return run_.done() ? Status::ok() : run_.progress();
  }
  Status on_completion(const transport::Completion& c, bool* ours) override {
    Status s = run_.on_completion(c, ours);
    if (!s.is_ok()) checks_.note_refused(c);
    return s;
  }
  Status check(Clock::time_point now) override {
    RETURN_IF_ERROR(checks_.aborted(what_));
    if (now >= deadline_.at()) return checks_.timeout(what_, run_.name(), run_.waiting_for());
    return checks_.board(now);
  }
  void dropped(const transport::Completion& c) override { checks_.dropped(what_, c); }
  Status poll_failed(Status s) override;  // rare: lone_run.cc

 private:
  OpRun& run_;
  const OpLabel& what_;
  const Deadline& deadline_;
  RunChecks checks_;
  bool started_ = false;
};

}  // namespace braid
