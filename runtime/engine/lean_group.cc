#include "runtime/engine/lean_group.h"

#include <utility>

namespace braid {

LeanGroup::LeanGroup(OpRun* const* runs, const int* after, size_t n, const OpLabel& what, const Deadline& deadline,
                     RunContext ctx)
    : n_(n), what_(what), deadline_(deadline), checks_(ctx) {
  for (size_t i = 0; i < n_; ++i) {
    runs_[i] = runs[i];
    after_[i] = after[i];
  }
}

bool LeanGroup::done() const {
  for (size_t i = 0; i < n_; ++i) {
    if (!started_[i] || !runs_[i]->done()) return false;
  }
  return true;
}

Status LeanGroup::advance() {
  for (size_t i = 0; i < n_; ++i) {
    if (!started_[i]) {
      const int a = after_[i];
      if (a >= 0 && !(started_[static_cast<size_t>(a)] && runs_[static_cast<size_t>(a)]->done())) continue;
      started_[i] = true;
      RETURN_IF_ERROR(runs_[i]->start());
    } else if (!runs_[i]->done()) {
      RETURN_IF_ERROR(runs_[i]->progress());
    }
  }
  return Status::ok();
}

Status LeanGroup::on_completion(const transport::Completion& c, bool* ours) {
  Status first;
  for (size_t i = 0; i < n_; ++i) {
    Status s = runs_[i]->on_completion(c, ours);
    if (!s.is_ok() && first.is_ok()) {
      first = std::move(s);
      checks_.note_refused(c);
    }
    if (*ours) break;
  }
  return first;
}

// As RunSet::timed_out: the first run started and not done names the stop, and every such run
// says what it waits for.
Status LeanGroup::timed_out() const {
  std::string name = runs_[0]->name(), waiting;
  bool named = false;
  for (size_t i = 0; i < n_; ++i) {
    if (!started_[i] || runs_[i]->done()) continue;
    if (!named) name = runs_[i]->name();
    named = true;
    waiting += (waiting.empty() ? "" : ", ") + runs_[i]->waiting_for();
  }
  return checks_.timeout(what_, name, waiting);
}

Status LeanGroup::check(Clock::time_point now) {
  RETURN_IF_ERROR(checks_.aborted(what_));
  if (now >= deadline_.at()) return timed_out();
  return checks_.board(now);
}

}  // namespace braid
