// tools/braidrun/store_wait.h - one blocking call to the job's store that SIGINT/SIGTERM can end.
//
// A store that accepts connections but never answers (its braidrun stopped, or something else
// on the port) blocks a store call for its whole timeout, and braidrun keeps SIGINT/SIGTERM
// blocked for its signalfd. So the call runs on a helper thread while braidrun's main thread
// watches the signalfd and says, every progress interval, what it waits for and where. On a
// signal the helper is left behind (detached, holding its own reference to the store) and
// braidrun goes on to exit; the call's result is then never looked at.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <string>

#include "braid/error.h"
#include "common/status.h"

namespace braid::braidrun {

struct StoreWaitOptions {
  int signal_fd = -1;
  std::chrono::milliseconds progress_every{10000};
};

// Runs `call` on a helper thread. Returns its Status; or, when SIGINT/SIGTERM arrives first,
// ErrorCode::aborted naming `what` (and `*stop_signal` = the signal). `what` reads after
// "waiting for": "the job's store at 10.0.0.1:29500 to hand out a node rank". `call` must own
// what it uses (copies, shared pointers): it may outlive this function.
Status wait_for_store(const StoreWaitOptions& options, const std::string& what, std::function<Status()> call,
                      int* stop_signal);

// Runs `f` (calls on a Store), turning what it throws into a Status that starts with `what`.
template <typename F>
Status store_call(const std::string& what, F&& f) {
  try {
    f();
    return Status::ok();
  } catch (const Error& e) {
    return Status(e.code(), what + ": " + e.what());
  } catch (const std::exception& e) {
    return internal_error(what + ": " + e.what());
  }
}

// Says "braidrun: still waiting for <what> (N s so far; ...)" when `every` has passed since the
// last time; call it from waiting loops that check signals themselves.
class ProgressLine {
 public:
  explicit ProgressLine(std::chrono::milliseconds every = std::chrono::milliseconds(10000));
  void tick(const std::string& what);

 private:
  std::chrono::steady_clock::time_point start_, next_;
  std::chrono::milliseconds every_;
};

}  // namespace braid::braidrun
