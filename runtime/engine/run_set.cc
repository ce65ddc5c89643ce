#include "runtime/engine/run_set.h"

namespace braid {

RunSet::RunSet(const std::vector<OpRun*>& runs, const std::vector<int>& after, std::vector<bool>& started,
               const OpLabel& what, const Deadline& deadline, FunctionRef<void()> between, Context ctx)
    : runs_(runs), after_(after), started_(started), what_(what), deadline_(deadline), between_(between), checks_(ctx) {
  started_.assign(runs_.size(), false);
}

bool RunSet::done() const {
  for (size_t i = 0; i < runs_.size(); ++i) {
    if (!started_[i] || !runs_[i]->done()) return false;
  }
  return true;
}

// Starts what may start and lets every started run post what it can.
Status RunSet::advance() {
  if (between_) between_();  // may append runs
  started_.resize(runs_.size(), false);
  for (size_t i = 0; i < runs_.size(); ++i) {
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

std::string RunSet::waiting_for() const {
  std::string w;
  for (size_t i = 0; i < runs_.size(); ++i) {
    if (started_[i] && !runs_[i]->done()) w += (w.empty() ? "" : ", ") + runs_[i]->waiting_for();
  }
  return w;
}

Status RunSet::timed_out() const {
  std::string name = runs_.front()->name();
  for (size_t i = 0; i < runs_.size(); ++i) {
    if (started_[i] && !runs_[i]->done()) {
      name = runs_[i]->name();
      break;
    }
  }
  return checks_.timeout(what_, name, waiting_for());
}

Status RunSet::check(Clock::time_point now) {
  RETURN_IF_ERROR(checks_.aborted(what_));
  if (now >= deadline_.at()) return timed_out();
  return checks_.board(now);
}

Status RunSet::on_completion(const transport::Completion& c, bool* ours) {
  Status first;
  for (OpRun* r : runs_) {
    Status s = r->on_completion(c, ours);
    if (!s.is_ok() && first.is_ok()) {
      first = s;
      checks_.note_refused(c);
    }
    if (*ours) break;
  }
  return first;
}

void RunSet::dropped(const transport::Completion& c) { checks_.dropped(what_, c); }

Status RunSet::poll_failed(Status s) { return checks_.poll_failed(what_, std::move(s)); }

}  // namespace braid
