// BraidWork and the ProcessGroup's machinery around it: issuing under the lock, coalescing,
// and the completion thread that finishes Works, completes Futures and enforces the timeout.
#include <Python.h>

#include <ATen/core/ivalue.h>

#include "process_group.h"

namespace braid::torch_backend {

namespace {

using Clock = std::chrono::steady_clock;

std::exception_ptr as_runtime_error(const std::string& op, int rank, const std::exception& e) {
  return std::make_exception_ptr(
      std::runtime_error("braid backend: " + op + " failed on rank " + std::to_string(rank) + ": " + e.what()));
}

}  // namespace

BraidWork::BraidWork(int rank, c10d::OpType type, std::string op_name, std::vector<at::Tensor> outputs,
                     Clock::time_point deadline, std::shared_ptr<CompletionQueue> queue)
    : c10d::Work(rank, type),
      op_name_(std::move(op_name)),
      outputs_(std::move(outputs)),
      deadline_(deadline),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      queue_(std::move(queue)) {}

void BraidWork::conclude(std::exception_ptr failure) {
  std::call_once(concluded_, [&] {
    if (!failure) {
      try {
        braid_.wait();  // already complete: rethrows braid's failure, if any
        for (auto& step : finish_steps_) step();
      } catch (const std::exception& e) {
        failure = as_runtime_error(op_name_, rank_, e);
      }
    }
    finish_steps_.clear();
    keep_alive_.clear();
    finish(failure);
    if (failure) {
      future_->setError(failure);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  });
}

bool BraidWork::isCompleted() {
  if (!c10d::Work::isCompleted() && braid_.test()) conclude(nullptr);
  return c10d::Work::isCompleted();
}

bool BraidWork::isSuccess() const { return c10d::Work::isSuccess(); }

std::exception_ptr BraidWork::exception() const { return c10d::Work::exception(); }

std::vector<at::Tensor> BraidWork::result() { return outputs_; }

bool BraidWork::wait(std::chrono::milliseconds timeout) {
  if (!c10d::Work::isCompleted()) {
    if (timeout <= std::chrono::milliseconds::zero()) {
      // braid::Work::wait runs the operation on this thread when nothing else is queued (the
      // short-message fast path); the completion thread still aborts it at the deadline.
      try {
        braid_.wait();
      } catch (const std::exception&) {
        // conclude() records it
      }
      conclude(nullptr);
    } else {
      bool done = false;
      try {
        done = braid_.wait_for(timeout);
      } catch (const std::exception&) {
        done = true;
      }
      if (!done) {
        throw std::runtime_error("braid backend: " + op_name_ + " on rank " + std::to_string(rank_) +
                                 " did not finish within the " + std::to_string(timeout.count()) +
                                 " ms given to wait(); it goes on, bounded by the group's timeout");
      }
      conclude(nullptr);
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> BraidWork::getFuture() {
  if (!wants_future_.exchange(true)) {
    // Under the lock, so the thread cannot miss it between its check and its sleep.
    { std::lock_guard<std::mutex> lock(queue_->mu); }
    queue_->cv.notify_one();
  }
  return future_;
}

BraidProcessGroup::BraidProcessGroup(braid::Communicator comm, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(comm.rank(), comm.size()), comm_(std::move(comm)), timeout_(timeout) {
  completer_ = std::thread([this] { complete_loop(); });
}

BraidProcessGroup::~BraidProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    queue_->stopping = true;
  }
  queue_->cv.notify_all();
  // The completion thread may drop the last reference to a tensor that has a Python object,
  // which takes the GIL: joining it with the GIL held (torch destroys groups from Python) would
  // wait forever.
  PyThreadState* saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
  completer_.join();
  if (saved != nullptr) PyEval_RestoreThread(saved);
}

c10::intrusive_ptr<BraidWork> BraidProcessGroup::make_work(c10d::OpType type, const char* name,
                                                           std::vector<at::Tensor> outputs,
                                                           std::chrono::milliseconds op_timeout) {
  const auto bound = op_timeout == c10d::kUnsetTimeout ? timeout_ : op_timeout;
  return c10::make_intrusive<BraidWork>(rank_, type, name, std::move(outputs), Clock::now() + bound, queue_);
}

c10::intrusive_ptr<BraidWork> BraidProcessGroup::start(c10::intrusive_ptr<BraidWork> work, const Issue& issue) {
  {
    std::lock_guard<std::mutex> lock(issue_mu_);
    try {
      work->set_braid_work(issue(comm_));
    } catch (const std::exception& e) {
      throw std::runtime_error("braid backend: " + work->op_name() + " could not start on rank " +
                               std::to_string(rank_) + ": " + e.what());
    }
    if (coalescing_) {
      // Inside a group braid cannot wait for it yet: queued at endCoalescing.
      coalesced_.push_back(work);
      return work;
    }
  }
  enqueue({work});
  return work;
}

void BraidProcessGroup::enqueue(std::vector<c10::intrusive_ptr<BraidWork>> works) {
  std::vector<c10::intrusive_ptr<BraidWork>> ended;
  {
    std::lock_guard<std::mutex> lock(queue_->mu);
    auto& q = queue_->works;
    while (!q.empty() && q.front()->concluded()) {
      ended.push_back(std::move(q.front()));
      q.pop_front();
    }
    for (auto& w : works) q.push_back(std::move(w));
  }
  // `ended` goes out of scope here, outside the lock: the last reference to a tensor that has
  // a Python object takes the GIL, and a thread holding the GIL may be waiting for the lock.
}

void BraidProcessGroup::startCoalescing() {
  std::lock_guard<std::mutex> lock(issue_mu_);
  comm_.group_start();
  coalescing_ = true;
}

void BraidProcessGroup::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs*/) {
  std::vector<c10::intrusive_ptr<BraidWork>> held;
  {
    std::lock_guard<std::mutex> lock(issue_mu_);
    coalescing_ = false;
    held.swap(coalesced_);
    try {
      (void)comm_.group_end();  // each call's own Work completes with the group
    } catch (const std::exception& e) {
      for (auto& w : held) w->conclude(as_runtime_error("batch_isend_irecv", rank_, e));
      throw;
    }
  }
  enqueue(std::move(held));
}

// Works finish in issue order (braid runs a communicator's operations in order), so watching
// the oldest is enough. One nobody awaits through a Future is left to its waiter: the thread
// only wakes at its deadline (or a second from now, to notice new Works), so a blocking call
// costs no thread wake-up. A Work past its deadline aborts the communicator, which ends every
// later one at once.
void BraidProcessGroup::complete_loop() {
  CompletionQueue& q = *queue_;
  std::unique_lock<std::mutex> lock(q.mu);
  for (;;) {
    if (q.works.empty()) {
      if (q.stopping) return;
      q.cv.wait_for(lock, std::chrono::seconds(1));
      continue;
    }
    c10::intrusive_ptr<BraidWork> work = q.works.front();
    const bool ended = work->concluded();
    if (!ended && !work->wants_future() && !q.stopping && Clock::now() < work->deadline() &&
        !work->braid_work().test()) {
      q.cv.wait_until(lock, std::min(work->deadline(), Clock::now() + std::chrono::seconds(1)));
      continue;
    }
    q.works.pop_front();
    lock.unlock();
    if (!ended) finish_one(*work);
    work.reset();  // outside the lock: may take the GIL (see enqueue)
    lock.lock();
  }
}

void BraidProcessGroup::finish_one(BraidWork& work) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(work.deadline() - Clock::now());
  bool done = false;
  try {
    done = work.braid_work().wait_for(std::max(left, std::chrono::milliseconds(0)));
  } catch (const std::exception&) {
    done = true;  // conclude() rethrows and records it
  }
  if (done) {
    work.conclude(nullptr);
    return;
  }
  const auto bound = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count());
  const std::string reason = work.op_name() + " did not finish within the process group's timeout (" + bound +
                             " s, init_process_group(timeout=...)) on rank " + std::to_string(rank_) +
                             "; a peer is slow, stuck or gone: check the other ranks";
  comm_.abort(reason);
  work.conclude(std::make_exception_ptr(std::runtime_error("braid backend: " + reason)));
}

}  // namespace braid::torch_backend
