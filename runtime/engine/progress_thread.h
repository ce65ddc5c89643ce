// runtime/engine/progress_thread.h - a communicator's progress thread: it builds the links, then
// runs queued operations in issue order whenever no caller runs them itself (op_queue.h).
//
// Between operations it spins briefly on new work (back-to-back operations arrive within a
// spin), then sleeps on the queue; while idle it reads the failure board once a second, so a
// rank that does nothing still learns that another one failed.
#pragma once

#include <cstdint>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "runtime/communicator_config.h"
#include "runtime/engine/held_completions.h"
#include "runtime/engine/op_queue.h"
#include "runtime/engine/op_runner.h"
#include "runtime/engine/run_factory.h"
#include "runtime/failure/comm_failure.h"
#include "runtime/links/comm_links.h"

namespace braid {

class ProgressThread {
 public:
  // Every reference outlives this; `cfg` gets the settled spin (CommLinks::connect).
  ProgressThread(CommunicatorConfig& cfg, OpQueue& queue, OpRunner& runner, HeldCompletions& held,
                 CommFailure& failure, CommLinks& links, RunFactory& runs)
      : cfg_(cfg), queue_(queue), runner_(runner), held_(held), failure_(failure), links_(links), runs_(runs) {}
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Starts the thread and returns once it built every connection (bounded: the links have
  // deadlines), with how that went. On failure the thread has ended.
  Status start() EXCLUDES(setup_mu_);
  // Returns once the thread ended (after OpQueue::stop(), once everything queued has run).
  void join();
  // True on any communicator's progress thread, so TRACE can say where an operation ran and
  // only that thread lets queued operations join a stream.
  static bool on_this_thread();

 private:
  void main() EXCLUDES(setup_mu_);
  // Runs operations until stopped.
  void loop();
  // After an operation: spins (yielding) while nothing new was queued beyond `taken`.
  void spin_for_work(uint64_t taken) const;

  CommunicatorConfig& cfg_;
  OpQueue& queue_;
  OpRunner& runner_;
  HeldCompletions& held_;
  CommFailure& failure_;
  CommLinks& links_;
  RunFactory& runs_;
  Mutex setup_mu_;
  CondVar setup_cv_;
  bool setup_done_ GUARDED_BY(setup_mu_) = false;
  Status setup_status_ GUARDED_BY(setup_mu_);
  std::thread thread_;
};

}  // namespace braid
