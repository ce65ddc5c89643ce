#include "runtime/engine/run_set.h"

#include "runtime/engine/run_order.h"

namespace braid {

RunSet::RunSet(const std::vector<OpRun*>& runs, const std::vector<int>& after, std::vector<bool>& started,
               const OpLabel& what, const Deadline& deadline, FunctionRef<void()> between, Context ctx)
    : runs_(runs), after_(after), started_(started), what_(what), deadline_(deadline), between_(between), checks_(ctx) {
  started_.assign(runs_.size(), false);
}

bool RunSet::done() const { return run_order::all_done(runs_, started_, runs_.size()); }

// `between` first: it may append runs.
Status RunSet::advance() {
  if (between_) between_();
  started_.resize(runs_.size(), false);
  return run_order::advance(runs_, after_, started_, runs_.size());
}

Status RunSet::check(Clock::time_point now) {
  RETURN_IF_ERROR(checks_.aborted(what_));
  if (now >= deadline_.at()) return run_order::timed_out(runs_, started_, runs_.size(), what_, checks_);
  return checks_.board(now);
}

Status RunSet::on_completion(const transport::Completion& c, bool* ours) {
  return run_order::on_completion(runs_, runs_.size(), c, ours, checks_);
}

void RunSet::dropped(const transport::Completion& c) { checks_.dropped(what_, c); }

Status RunSet::poll_failed(Status s) { return checks_.poll_failed(what_, std::move(s)); }

}  // namespace braid
