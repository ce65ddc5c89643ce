#include "runtime/engine/lone_run.h"

namespace braid {

Status LoneRun::poll_failed(Status s) { return checks_.poll_failed(what_, std::move(s)); }

}  // namespace braid
