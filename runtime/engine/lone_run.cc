#include "runtime/engine/lone_run.h"

namespace braid {

Status LoneRun::advance() {
  if (!started_) {
    started_ = true;
    return run_.start();
  }
  return run_.done() ? Status::ok() : run_.progress();
}

Status LoneRun::on_completion(const transport::Completion& c, bool* ours) {
  Status s = run_.on_completion(c, ours);
  if (!s.is_ok()) checks_.note_refused(c);
  return s;
}

Status LoneRun::check(Clock::time_point now) {
  RETURN_IF_ERROR(checks_.aborted(what_));
  if (now >= deadline_.at()) return checks_.timeout(what_, run_.name(), run_.waiting_for());
  return checks_.board(now);
}

}  // namespace braid
