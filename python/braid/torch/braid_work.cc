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
                     Clock::time_point deadline)
    : c10d::Work(rank, type),
      op_name_(std::move(op_name)),
      outputs_(std::move(outputs)),
      deadline_(deadline),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

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

c10::intrusive_ptr<c10::ivalue::Future> BraidWork::getFuture() { return future_; }

BraidProcessGroup::BraidProcessGroup(braid::Communicator comm, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(comm.rank(), comm.size()), comm_(std::move(comm)), timeout_(timeout) {
  completer_ = std::thread([this] { complete_loop(); });
}

BraidProcessGroup::~BraidProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
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
  return c10::make_intrusive<BraidWork>(rank_, type, name, std::move(outputs), Clock::now() + bound);
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
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back(work);
  }
  queue_cv_.notify_one();
  return work;
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
  std::lock_guard<std::mutex> lock(queue_mu_);
  for (auto& w : held) queue_.push_back(w);
  queue_cv_.notify_one();
}

// Works finish in issue order (braid runs a communicator's operations in order), so waiting
// for the oldest is enough; a Work that misses its deadline aborts the communicator, which ends
// every later one at once.
void BraidProcessGroup::complete_loop() {
  for (;;) {
    c10::intrusive_ptr<BraidWork> work;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      work = queue_.front();
      queue_.pop_front();
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(work->deadline() - Clock::now());
    bool done = false;
    try {
      done = work->braid_work().wait_for(std::max(left, std::chrono::milliseconds(0)));
    } catch (const std::exception&) {
      done = true;  // conclude() rethrows and records it
    }
    if (!done) {
      const auto bound = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count());
      const std::string reason = work->op_name() + " did not finish within the process group's timeout (" + bound +
                                 " s, init_process_group(timeout=...)) on rank " + std::to_string(rank_) +
                                 "; a peer is slow, stuck or gone: check the other ranks";
      comm_.abort(reason);
      work->conclude(std::make_exception_ptr(std::runtime_error("braid backend: " + reason)));
      continue;
    }
    work->conclude(nullptr);
  }
}

}  // namespace braid::torch_backend
