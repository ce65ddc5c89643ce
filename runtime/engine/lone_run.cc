#include "runtime/engine/lone_run.h"

namespace braid {

Status LoneRun::check(Clock::time_point now) {
  RETURN_IF_ERROR(checks_.aborted(what_));
  if (now >= deadline_.at()) return checks_.timeout(what_, run_.name(), run_.waiting_for());
  return checks_.board(now);
}

}  // namespace braid
