// braid/ddp/reducer.h - averages gradients across ranks while backward is still running.
//
// The training loop registers its f32 parameters once. Each step it computes gradients,
// calls mark_ready(i) as each parameter's gradient is final (in any order, e.g. from an
// autograd hook), then finalize(). A bucket's reduction starts the moment its last gradient is
// ready, provided every earlier bucket has started (all ranks must launch collectives in the
// same order); finalize() starts what is left, waits, and leaves the average over ranks in
// every gradient.
//
//   std::vector<braid::ddp::Parameter> ps = {{w.data(), nullptr, w.size()}, ...};
//   braid::ddp::Reducer reducer(comm, ps);     // broadcasts rank 0's weights to everyone
//   for (...) {
//     reducer.zero_grad();
//     backward(..., reducer.grad(i)) ... reducer.mark_ready(i);   // last layer first
//     reducer.finalize();
//     sgd_step(w, reducer.grad(i));
//   }
//
// Gradient storage: a Parameter with grad == nullptr has its gradient owned by the Reducer, as
// a view into bucket memory (no copy on either side of the all_reduce). grad(i) points there;
// re-read it after finalize(), since the first finalize() may rebuild the buckets (new
// memory, values kept). A Parameter with its own grad pointer is copied into the bucket when
// the bucket starts and back after the reduction.
//
// Gradients accumulate: write or add into grad(i); the Reducer never clears them except in
// zero_grad() and for parameters that got no gradient (see finalize()).
//
// Threading: mark_ready may be called from several threads; the other calls from one thread,
// not concurrently with mark_ready. Between mark_ready(i) and finalize(), grad(i) belongs to the
// Reducer: do not touch it. Errors throw braid::Error; after one, the Reducer refuses further
// steps (every call throws ErrorCode::aborted with the first failure's message).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid/communicator.h"
#include "braid/ddp/bucket_plan.h"
#include "braid/ddp/comm_hook.h"
#include "braid/ddp/model_sync.h"
#include "braid/work.h"

namespace braid::ddp {

struct Parameter {
  float* data = nullptr;  // the weights (broadcast from rank 0 when the Reducer is built)
  float* grad = nullptr;  // the caller's gradient buffer, or nullptr: the Reducer owns it
  size_t count = 0;
};

struct ReducerOptions {
  BucketOptions buckets{};
  // After the first synchronized step, re-plan buckets in the order gradients became ready on
  // rank 0 (broadcast, so every rank agrees), as torch's DDP does.
  bool rebuild_buckets = true;
  // Copy rank 0's parameters (and `buffers`) to every rank in the constructor.
  bool broadcast_parameters = true;
  // Other state that must agree across ranks (running statistics...): broadcast from rank 0 in
  // the constructor and by broadcast_buffers(). Must outlive the Reducer.
  std::vector<TensorRef> buffers{};
  // What to do with a ready bucket; null means average_hook().
  std::shared_ptr<CommHook> hook{};
};

class Reducer {
 public:
  // `comm` and every parameter's memory must outlive the Reducer. Collective: every rank
  // constructs its Reducer with the same parameter counts, in the same order (checked).
  Reducer(Communicator& comm, std::vector<Parameter> params, ReducerOptions options = {});
  ~Reducer();  // waits (bounded by the communicator's timeout) for reductions still in flight
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  size_t num_parameters() const { return params_.size(); }
  // The gradient of parameter i: the caller's buffer, or the Reducer's view into a bucket.
  float* grad(size_t i);
  // Sets every gradient to zero (call before accumulating a new step's gradients).
  void zero_grad();

  // Parameter i's gradient for this step is final. Starts every bucket that became launchable.
  // Marking the same parameter twice in one step is an error (invalid_argument).
  void mark_ready(size_t i);
  // Ends the step. Parameters not marked ready since the last reduction count as a zero
  // gradient. Starts the remaining buckets, waits for all of them (failures, e.g. a lost peer,
  // throw braid::Error naming the bucket and step), and leaves the averaged gradients in place.
  // Under no_sync, only ends the step: gradients keep accumulating locally.
  void finalize();

  // While set, steps do not communicate: gradients accumulate locally and the next step
  // without no_sync reduces the sum (like torch's `with ddp.no_sync():`).
  void set_no_sync(bool no_sync);
  bool no_sync() const { return no_sync_; }
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer& r) : r_(r), prev_(r.no_sync()) { r_.set_no_sync(true); }
    ~NoSyncGuard() { r_.set_no_sync(prev_); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    Reducer& r_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync_scope() { return NoSyncGuard(*this); }

  // Copies rank 0's buffers (ReducerOptions::buffers) to every rank. Collective.
  void broadcast_buffers();

  const BucketPlan& plan() const { return plan_; }
  size_t num_rebuilds() const { return rebuilds_; }
  uint64_t steps() const { return synced_steps_; }  // synchronized steps finished

 private:
  struct BucketState;

  void check_usable(const char* op) const;
  void fail(ErrorCode code, const std::string& message);
  void launch_ready_locked();
  void launch_locked(size_t b);
  void wait_bucket(size_t b);
  void rebuild();
  void layout_storage(const BucketPlan& plan, bool keep_values);
  void reset_step();
  std::string describe_bucket(size_t b) const;

  Communicator& comm_;
  std::vector<Parameter> params_;
  ReducerOptions options_;
  std::shared_ptr<CommHook> hook_;

  BucketPlan plan_;
  std::vector<std::unique_ptr<BucketState>> buckets_;
  std::vector<float*> owned_grad_;   // per parameter: view into bucket memory, or nullptr
  std::vector<bool> ready_;          // marked in this step
  std::vector<bool> touched_;        // marked since the last reduction (no_sync included)
  std::vector<size_t> ready_order_;  // the first synchronized step's order, for rebuild
  size_t next_launch_ = 0;

  bool no_sync_ = false;
  bool rebuilt_ = false;
  size_t rebuilds_ = 0;
  uint64_t synced_steps_ = 0;
  std::string failure_;

  std::mutex mu_;
};

}  // namespace braid::ddp
