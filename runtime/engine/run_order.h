// runtime/engine/run_order.h - what RunSet (runs driven together, their list growing as a stream
// takes more) and LeanGroup (a small group's runs in fixed slots) do alike with their runs: runs[i]
// starts once runs[after[i]] is done (after[i] < i), or at once when after[i] is -1; every
// started run posts what it can on each pass; a completion goes to the run whose cookie it
// carries; a timeout names the first run started and not done, and what each such run waits for.
//
// Templates over the containers (a vector or fixed slots; `started` a vector<bool> or an array):
// `n` runs of each are used.
//
// Threading: the thread that holds the engine (op_queue.h).
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "common/status.h"
#include "runtime/engine/op_label.h"
#include "runtime/engine/op_run.h"
#include "runtime/engine/run_checks.h"
#include "transport/transport.h"

namespace braid::run_order {

template <typename Runs, typename Started>
bool all_done(const Runs& runs, const Started& started, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!started[i] || !runs[i]->done()) return false;
  }
  return true;
}

// Starts what may start and lets every started run post what it can.
template <typename Runs, typename After, typename Started>
Status advance(const Runs& runs, const After& after, Started& started, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!started[i]) {
      const int a = after[i];
      if (a >= 0 && !(started[static_cast<size_t>(a)] && runs[static_cast<size_t>(a)]->done())) continue;
      started[i] = true;
      RETURN_IF_ERROR(runs[i]->start());
    } else if (!runs[i]->done()) {
      RETURN_IF_ERROR(runs[i]->progress());
    }
  }
  return Status::ok();
}

// Hands `c` to the run it belongs to (*ours says whether one took it); the first refusal's
// Status, with the failed peer noted for the report.
template <typename Runs>
Status on_completion(const Runs& runs, size_t n, const transport::Completion& c, bool* ours, const RunChecks& checks) {
  Status first;
  for (size_t i = 0; i < n; ++i) {
    Status s = runs[i]->on_completion(c, ours);
    if (!s.is_ok() && first.is_ok()) {
      first = std::move(s);
      checks.note_refused(c);
    }
    if (*ours) break;
  }
  return first;
}

// The deadline passed: the first run started and not done names the stop, and every such run
// says what it waits for.
template <typename Runs, typename Started>
Status timed_out(const Runs& runs, const Started& started, size_t n, const OpLabel& what, const RunChecks& checks) {
  std::string name = runs[0]->name(), waiting;
  bool named = false;
  for (size_t i = 0; i < n; ++i) {
    if (!started[i] || runs[i]->done()) continue;
    if (!named) name = runs[i]->name();
    named = true;
    waiting += (waiting.empty() ? "" : ", ") + runs[i]->waiting_for();
  }
  return checks.timeout(what, name, waiting);
}

}  // namespace braid::run_order
