#include "runtime/engine/lean_group.h"

#include "runtime/engine/run_order.h"

namespace braid {

LeanGroup::LeanGroup(OpRun* const* runs, const int* after, size_t n, const OpLabel& what, const Deadline& deadline,
                     RunContext ctx)
    : n_(n), what_(what), deadline_(deadline), checks_(ctx) {
  for (size_t i = 0; i < n_; ++i) {
    runs_[i] = runs[i];
    after_[i] = after[i];
  }
}

bool LeanGroup::done() const { return run_order::all_done(runs_, started_, n_); }

Status LeanGroup::advance() { return run_order::advance(runs_, after_, started_, n_); }

Status LeanGroup::on_completion(const transport::Completion& c, bool* ours) {
  return run_order::on_completion(runs_, n_, c, ours, checks_);
}

Status LeanGroup::check(Clock::time_point now) {
  RETURN_IF_ERROR(checks_.aborted(what_));
  if (now >= deadline_.at()) return run_order::timed_out(runs_, started_, n_, what_, checks_);
  return checks_.board(now);
}

}  // namespace braid
