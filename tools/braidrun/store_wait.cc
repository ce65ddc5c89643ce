#include "tools/braidrun/store_wait.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>

#include "tools/braidrun/node_rendezvous.h"
#include "tools/braidrun/output_relay.h"
#include "tools/braidrun/rank_exit.h"

namespace braid::braidrun {

using Clock = std::chrono::steady_clock;

ProgressLine::ProgressLine(std::chrono::milliseconds every)
    : start_(Clock::now()), next_(Clock::now() + every), every_(every) {}

void ProgressLine::tick(const std::string& what) {
  const auto now = Clock::now();
  if (now < next_) return;
  next_ = now + every_;
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(now - start_).count();
  write_all(STDERR_FILENO, "braidrun: still waiting for " + what + " (" + std::to_string(s) +
                               " s so far; SIGINT or SIGTERM stops braidrun)\n");
}

Status wait_for_store(const StoreWaitOptions& options, const std::string& what, std::function<Status()> call,
                      int* stop_signal) {
  struct Shared {
    std::atomic<bool> done{false};
    Status result;
  };
  auto shared = std::make_shared<Shared>();
  std::thread helper([shared, call = std::move(call)] {
    shared->result = call();
    shared->done.store(true, std::memory_order_release);
  });
  ProgressLine progress(options.progress_every);
  while (!shared->done.load(std::memory_order_acquire)) {
    pollfd p{options.signal_fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      if (auto sig = take_stop_signal(options.signal_fd)) {
        helper.detach();
        if (stop_signal) *stop_signal = *sig;
        return Status(ErrorCode::aborted, "interrupted by " + signal_name(*sig) + " while waiting for " + what);
      }
    }
    progress.tick(what);
  }
  helper.join();
  return shared->result;
}

}  // namespace braid::braidrun
