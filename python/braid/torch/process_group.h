// python/braid/torch/process_group.h - the torch.distributed backend "braid": a c10d
// ProcessGroup (torch 1.13's API) that runs every operation on a braid::Communicator.
//
// Each torch call becomes one braid *_async call (or a group of them) on CPU tensors. Tensors
// braid cannot use as they are (non-contiguous, bool, lists that must be packed) are staged:
// the operation runs on a contiguous copy and the result is copied back when it completes.
// A BraidWork is finished either by the thread that waits on it (which then runs the operation
// itself, braid's fast path for short messages) or by the group's completion thread, which
// finishes every Work in issue order, completes its Future (DDP's comm hooks wait on those) and
// enforces the group's timeout: an operation still running at its deadline aborts the
// communicator, so every pending and later operation fails naming the timeout, as NCCL does.
//
// Threading: torch may call the operations from any thread (DDP calls allreduce from autograd
// threads); calls into the communicator are serialized by a mutex, in the order they arrive.
#pragma once

#include <braid/braid.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace braid::torch_backend {

class BraidWork;

// The Works a group's completion thread watches, shared with the Works so that getFuture() can
// wake it. Works whose result nobody awaits through a Future are only watched for their
// deadline: the thread sleeps until then, and a blocking call costs it no wake-up.
struct CompletionQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<c10::intrusive_ptr<BraidWork>> works;
  bool stopping = false;
};

// One torch operation in flight. `outputs` are the tensors torch sees as the result (its
// Future's value); `finish_steps` copy staged results into them once braid is done.
class BraidWork : public c10d::Work {
 public:
  BraidWork(int rank, c10d::OpType type, std::string op_name, std::vector<at::Tensor> outputs,
            std::chrono::steady_clock::time_point deadline, std::shared_ptr<CompletionQueue> queue);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  // timeout 0 (torch's kNoTimeout): until the operation ends, which the group's timeout bounds.
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // For the ProcessGroup while it builds the operation.
  void set_braid_work(braid::Work w) { braid_ = std::move(w); }
  void add_finish_step(std::function<void()> step) { finish_steps_.push_back(std::move(step)); }
  // Keeps staging buffers alive until the operation is done.
  void keep(at::Tensor t) { keep_alive_.push_back(std::move(t)); }
  // Ends the Work with braid's outcome (or `failure`); the first caller wins.
  void conclude(std::exception_ptr failure);

  bool concluded() { return c10d::Work::isCompleted(); }
  bool wants_future() const { return wants_future_.load(); }
  braid::Work& braid_work() { return braid_; }
  const std::string& op_name() const { return op_name_; }
  std::chrono::steady_clock::time_point deadline() const { return deadline_; }

 private:
  std::string op_name_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_alive_;
  std::vector<std::function<void()>> finish_steps_;
  braid::Work braid_;
  std::chrono::steady_clock::time_point deadline_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<CompletionQueue> queue_;
  std::atomic<bool> wants_future_{false};
  std::once_flag concluded_;
};

class BraidProcessGroup : public c10d::ProcessGroup {
 public:
  BraidProcessGroup(braid::Communicator comm, std::chrono::milliseconds timeout);
  ~BraidProcessGroup() override;

  const std::string getBackendName() const override { return "braid"; }
  void startCoalescing() override;
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  using Issue = std::function<braid::Work(braid::Communicator&)>;
  // Makes the Work, runs `issue` under the communicator's lock and hands the Work to the
  // completion thread (or holds it until endCoalescing). A braid error while issuing fails the
  // call at once.
  c10::intrusive_ptr<BraidWork> start(c10::intrusive_ptr<BraidWork> work, const Issue& issue);
  c10::intrusive_ptr<BraidWork> make_work(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                          std::chrono::milliseconds op_timeout);
  void complete_loop();
  // Waits for `work` (bounded by its deadline, aborting the communicator past it) and ends it.
  void finish_one(BraidWork& work);
  // Queues `work` for the completion thread, first dropping Works their waiters already ended.
  void enqueue(std::vector<c10::intrusive_ptr<BraidWork>> works);

  braid::Communicator comm_;
  std::chrono::milliseconds timeout_;
  std::mutex issue_mu_;  // one call into comm_ at a time
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<BraidWork>> coalesced_;

  std::shared_ptr<CompletionQueue> queue_ = std::make_shared<CompletionQueue>();
  std::thread completer_;
};

}  // namespace braid::torch_backend
