#include "runtime/engine/progress_thread.h"

#include <chrono>
#include <optional>

#include "common/log.h"
#include "common/spin.h"
#include "runtime/engine/run_set.h"
#include "runtime/links/spin_policy.h"

namespace braid {
namespace {

thread_local bool t_progress_thread = false;

}  // namespace

bool ProgressThread::on_this_thread() { return t_progress_thread; }

Status ProgressThread::start() {
  thread_ = std::thread([this] { main(); });
  MutexLock lock(setup_mu_);
  while (!setup_done_) setup_cv_.wait(lock);
  return setup_status_;
}

void ProgressThread::join() {
  if (thread_.joinable()) thread_.join();
}

void ProgressThread::main() {
  t_progress_thread = true;
  spin_only_for_waiters();
  Status s = links_.connect(cfg_);
  {
    MutexLock lock(setup_mu_);
    setup_status_ = s;
    setup_done_ = true;
  }
  setup_cv_.notify_all();
  if (!s.is_ok()) return;
  loop();
  const OpQueue::HandOffCounts ran = queue_.counts();
  BRAID_LOG(trace) << "rank " << cfg_.rank << " closing: " << ran.on_caller << " operations ran on callers' threads, "
                   << ran.on_progress_thread << " on the progress thread; it woke " << ran.progress_wakeups
                   << " times while idle";
  runs_.cache().clear();  // the kept runs name the connections
  failure_.close_connections({});
  links_.reset();
}

void ProgressThread::spin_for_work(uint64_t taken) const {
  // A wake-up through the condition variable costs far more than a short spin, and back-to-back
  // operations (the common case in a training step or a benchmark) arrive within one.
  auto spin_end = Clock::now() + std::chrono::microseconds(cfg_.env.spin_us);
  SpinScope spin;
  // Yield, never pause: the next operation comes from a caller that may share this CPU.
  while (queue_.enqueued() == taken && Clock::now() < spin_end) std::this_thread::yield();
}

void ProgressThread::loop() {
  uint64_t taken = 0;   // operations pushed to the queue that had left it after the last pass
  bool worked = false;  // the last pass ran an operation
  for (;;) {
    if (worked) spin_for_work(taken);
    std::optional<PendingOp> op;
    const OpQueue::Turn turn = queue_.next_turn(Clock::now() + RunSet::kBoardInterval, &op);
    // Another thread runs operations (a caller on its own thread): it watches the failure
    // board while it waits, and hands back what it leaves queued when it is done.
    if (turn == OpQueue::Turn::elsewhere) {
      worked = false;
      continue;
    }
    if (failure_.abort_pending()) failure_.handle_abort();
    worked = turn == OpQueue::Turn::run;
    if (worked) {
      queue_.count_on_progress();
      held_.set_holding(true);
      runner_.run_one(*op);
      held_.set_holding(false);
      if (cfg_.after_progress_op) cfg_.after_progress_op();
    } else if (turn == OpQueue::Turn::stop) {
      break;  // the engine stays taken: nothing runs after this
    } else {
      failure_.idle_check();
    }
    // What has left the queue by now (this pass's pop, what a stream took, what callers ran
    // themselves) is read in the same critical section that gives the engine back: the spin
    // above waits for anything beyond it.
    queue_.release(&taken);
    held_.complete_held();
  }
}

}  // namespace braid
