// braid/ddp/torch.h - data-parallel training of a libtorch module: a Reducer wired into autograd.
//
//   braid::Communicator comm = braid::Communicator::from_env();
//   braid::ddp::TorchDdp ddp(comm, *model);     // every rank now holds rank 0's parameters
//   for (...) {
//     optimizer.zero_grad();
//     loss_fn(model->forward(x), y).backward(); // buckets are all-reduced while backward runs
//     ddp.synchronize();                        // every param.grad() is the average over ranks
//     optimizer.step();
//   }
//
// Link with libbraid_torch (pkg-config braid-torch), built when braid is configured with the
// `torch` feature and Debian's libtorch-dev is present. This header needs none of libtorch's:
// the adapter's state lives in the .cc, so the forward declaration below is all it names.
//
// What it does: every parameter of the module that requires a gradient (f32, on the CPU,
// contiguous) is registered with a braid::ddp::Reducer, in named_parameters() order (a tensor
// shared by two submodules, once). A hook on each parameter's gradient accumulator reports
// the gradient ready the moment autograd has accumulated it, so a bucket's all_reduce starts
// while backward is still computing earlier layers. param.grad() is made a view into the
// Reducer's bucket memory: autograd accumulates straight into the bucket, and the averaged
// values land where the optimizer reads them, with no copy. When something rebinds a gradient
// (zero_grad with set_to_none, an assignment to mutable_grad()), its values are copied into
// the bucket and the view is put back: whatever param.grad() holds when autograd reports it
// ready is what gets reduced.
//
// Parameters that do not require a gradient, and the module's buffers (running statistics),
// are broadcast from rank 0 in the constructor and by broadcast_buffers(), not reduced.
//
// A step is one backward pass and one synchronize(). A parameter that got no gradient in a
// step (a branch this rank's batch did not take) contributes zero from this rank, or what
// earlier no_sync steps accumulated in its grad(); after the step its grad() is defined on
// every rank, zero when no rank produced a gradient for it (torch leaves such a gradient
// undefined: plain SGD leaves the parameter alone either way, but momentum or weight decay
// moves it on a zero gradient, where they skip an undefined one).
//
// Lifetime: `comm` and `module` must outlive the TorchDdp; parameters and buffers must not be
// replaced or moved (module->to(...)) while it exists. Re-read param.grad() after
// synchronize(): the first one may move the buckets (see Reducer). The destructor gives every
// gradient its own memory again, so the module remains usable without the adapter.
//
// Threading: CPU backward runs the hooks on the thread that called backward(); the other calls
// belong to the training loop's thread, not concurrently with a backward pass. Errors throw
// braid::Error; from a hook they surface out of backward().
#pragma once

#include <cstddef>
#include <memory>

#include "braid/communicator.h"
#include "braid/ddp/reducer.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace braid::ddp {

class TorchDdp {
 public:
  // Collective: every rank passes a module with the same parameters and buffers, in the same
  // order (checked; a difference is braid::Error(mismatch) on every rank). `options` are the
  // Reducer's; the module's buffers and frozen parameters are appended to options.buffers.
  // Throws braid::Error(invalid_argument) for a trainable parameter that is not an f32,
  // contiguous CPU tensor, or a buffer of a dtype braid cannot carry.
  TorchDdp(Communicator& comm, torch::nn::Module& module, ReducerOptions options = {});
  ~TorchDdp();
  TorchDdp(const TorchDdp&) = delete;
  TorchDdp& operator=(const TorchDdp&) = delete;

  // Ends the step: parameters that got no gradient count as zero, the remaining buckets start,
  // and when it returns every trainable parameter's grad() holds the average over all ranks.
  // Under no_sync, only ends the step (no communication); gradients keep accumulating.
  void synchronize();

  // While set, steps accumulate gradients locally, and the next step without it reduces the
  // sum, like torch's `with ddp.no_sync():`. A step takes the setting in force when its
  // backward produced its first gradient (or at synchronize(), when it produced none), so the
  // flag may be cleared before or after synchronize().
  void set_no_sync(bool no_sync);
  bool no_sync() const;
  class NoSyncScope {
   public:
    explicit NoSyncScope(TorchDdp& ddp) : ddp_(ddp), prev_(ddp.no_sync()) { ddp_.set_no_sync(true); }
    ~NoSyncScope() { ddp_.set_no_sync(prev_); }
    NoSyncScope(const NoSyncScope&) = delete;
    NoSyncScope& operator=(const NoSyncScope&) = delete;

   private:
    TorchDdp& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncScope no_sync_scope() { return NoSyncScope(*this); }

  // Copies rank 0's buffers and frozen parameters to every rank again. Collective.
  void broadcast_buffers();

  // Trainable parameters registered with the Reducer (its indices follow named_parameters()).
  size_t num_parameters() const;
  // Gradients the autograd hooks reported ready since the last synchronize(): after
  // backward(), the number of trainable parameters this backward reached.
  size_t gradients_ready() const;
  // The Reducer underneath, for its bucket plan and statistics. Do not call mark_ready,
  // finalize or set_no_sync on it directly.
  Reducer& reducer();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace braid::ddp
