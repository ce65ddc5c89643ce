// TorchDdp: the Reducer, fed by autograd.
//
// Why the gradient accumulator's post hook: a hook registered with Tensor::register_hook runs
// on the incoming gradient *before* autograd adds it into param.grad(), so the gradient is
// not final there and cannot be reduced in place. The AccumulateGrad node of a leaf runs once
// per backward pass, after every contribution to that parameter has been summed, and its post
// hooks run right after it has written param.grad(): the moment to call mark_ready. torch's
// own DistributedDataParallel hooks the same node. A parameter only holds its accumulator
// weakly (it is rebuilt when no graph refers to it), so we keep it alive, or our hook would
// vanish with the first graph.
//
// Why views: param.grad() is set to a tensor over the Reducer's bucket memory (from_blob, no
// ownership). AccumulateGrad adds into an existing gradient in place, so backward writes
// straight into the bucket and the averaged result is already where the optimizer reads it.
// Anything that rebinds param.grad() (set_to_none, an assignment) is caught at the next
// report or synchronize(): its values are copied into the bucket and the view put back.
#include "braid/ddp/torch.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "braid/error.h"

namespace braid::ddp {
namespace {

// Runs `on_ready` after the AccumulateGrad node it is attached to has updated param.grad().
class GradientReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grad_inputs,
                                            const torch::autograd::variable_list& /*grad_outputs*/) override {
    on_ready_();
    return grad_inputs;
  }

 private:
  std::function<void()> on_ready_;
};

std::string describe(const torch::Tensor& t) {
  return std::string(c10::toString(t.scalar_type())) + " on " + t.device().str() +
         (t.is_contiguous() ? "" : ", not contiguous");
}

// The braid dtype a buffer travels as. bool is one byte of 0 or 1, so u8 carries it.
DType wire_dtype(const torch::Tensor& t, const std::string& name) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return DType::f32;
    case torch::kDouble:
      return DType::f64;
    case torch::kHalf:
      return DType::f16;
    case torch::kBFloat16:
      return DType::bf16;
    case torch::kChar:
      return DType::i8;
    case torch::kByte:
      return DType::u8;
    case torch::kBool:
      return DType::u8;
    case torch::kInt:
      return DType::i32;
    case torch::kLong:
      return DType::i64;
    default:
      throw Error(ErrorCode::invalid_argument,
                  "ddp: TorchDdp cannot broadcast '" + name + "' (" + describe(t) +
                      "): buffers and frozen parameters must be float, double, half, bfloat16, int8, uint8, bool, "
                      "int32 or int64; convert it, or keep it out of the module's registered state");
  }
}

}  // namespace

struct TorchDdp::State {
  // Makes views[i] hold the values param.grad() holds, and param.grad() the view again.
  void adopt_locked(size_t i);
  // Points views[i] at the Reducer's gradient memory (which the first synchronize() may move)
  // and param.grad() at views[i].
  void bind_views_locked();
  // The first report of a step (or its synchronize()) fixes the step's no_sync setting.
  void start_step_locked();
  void on_gradient(size_t i);

  std::vector<torch::Tensor> params;  // trainable, in named_parameters() order
  std::vector<std::string> names;
  std::vector<torch::Tensor> shared_state;  // frozen parameters and buffers: broadcast, not reduced
  std::unique_ptr<Reducer> reducer;
  std::vector<torch::Tensor> views;  // views[i] aliases reducer->grad(i)
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  std::vector<uintptr_t> hook_keys;
  std::vector<bool> reported;  // reported ready in the current step
  size_t ready = 0;
  bool step_started = false;
  std::atomic<bool> no_sync_wanted{false};
  mutable std::mutex mu;
};

void TorchDdp::State::adopt_locked(size_t i) {
  torch::Tensor& grad = params[i].mutable_grad();
  if (grad.defined() && grad.is_same(views[i])) return;
  torch::NoGradGuard no_grad;
  if (grad.defined()) {
    views[i].copy_(grad);
  } else {
    views[i].zero_();  // dropped (set_to_none): nothing accumulated any more
  }
  grad = views[i];
}

void TorchDdp::State::bind_views_locked() {
  for (size_t i = 0; i < params.size(); ++i) {
    float* memory = reducer->grad(i);
    if (!views[i].defined() || views[i].data_ptr() != memory) {
      const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
      views[i] = params[i].numel() == 0 ? torch::empty(params[i].sizes(), f32)
                                        : torch::from_blob(memory, params[i].sizes(), f32);
    }
    torch::Tensor& grad = params[i].mutable_grad();
    if (!grad.defined() || !grad.is_same(views[i])) grad = views[i];
  }
}

void TorchDdp::State::start_step_locked() {
  if (step_started) return;
  reducer->set_no_sync(no_sync_wanted.load());
  step_started = true;
}

void TorchDdp::State::on_gradient(size_t i) {
  std::lock_guard<std::mutex> lock(mu);
  if (reported[i]) {
    throw Error(ErrorCode::invalid_argument,
                "ddp: parameter '" + names[i] +
                    "' got a second gradient before synchronize(): call synchronize() after every backward() "
                    "(under no_sync too), or give each backward pass of a step its own synchronize()");
  }
  start_step_locked();
  adopt_locked(i);
  reported[i] = true;
  ++ready;
  reducer->mark_ready(i);
}

TorchDdp::TorchDdp(Communicator& comm, torch::nn::Module& module, ReducerOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  std::vector<Parameter> trainable;
  std::vector<std::string> shared_names;
  // A tensor shared by two submodules (tied weights) is listed under both names; it has one
  // gradient accumulator and must be one Reducer parameter.
  std::unordered_set<const void*> seen;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!p.defined() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    if (!p.requires_grad()) {
      s.shared_state.push_back(p);
      shared_names.push_back(item.key());
      continue;
    }
    if (p.scalar_type() != torch::kFloat || !p.device().is_cpu() || !p.is_contiguous()) {
      throw Error(ErrorCode::invalid_argument,
                  "ddp: parameter '" + item.key() + "' is " + describe(p) +
                      ": TorchDdp averages f32, contiguous CPU parameters; convert the module first "
                      "(module->to(torch::kFloat32)), or set requires_grad(false) on what should not be trained");
    }
    s.params.push_back(p);
    s.names.push_back(item.key());
    trainable.push_back(
        Parameter{.data = p.data_ptr<float>(), .grad = nullptr, .count = static_cast<size_t>(p.numel())});
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    if (!item.value().defined() || !seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
    s.shared_state.push_back(item.value());
    shared_names.push_back(item.key());
  }
  for (size_t k = 0; k < s.shared_state.size(); ++k) {
    const torch::Tensor& t = s.shared_state[k];
    if (!t.device().is_cpu() || !t.is_contiguous()) {
      throw Error(ErrorCode::invalid_argument, "ddp: '" + shared_names[k] + "' is " + describe(t) +
                                                   ": TorchDdp broadcasts contiguous CPU tensors only");
    }
    options.buffers.push_back(TensorRef{
        .data = t.data_ptr(), .count = static_cast<size_t>(t.numel()), .dtype = wire_dtype(t, shared_names[k])});
  }
  s.reducer = std::make_unique<Reducer>(comm, std::move(trainable), std::move(options));

  const size_t n = s.params.size();
  s.views.resize(n);
  s.reported.assign(n, false);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    // Gradients the module already had (a run resumed mid-accumulation) keep their values.
    std::vector<torch::Tensor> existing;
    for (const torch::Tensor& p : s.params) existing.push_back(p.grad());
    s.bind_views_locked();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < n; ++i) {
      if (existing[i].defined()) s.views[i].copy_(existing[i]);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    std::shared_ptr<torch::autograd::Node> accumulator = torch::autograd::impl::grad_accumulator(s.params[i]);
    if (!accumulator) {
      throw Error(ErrorCode::internal, "ddp: parameter '" + s.names[i] +
                                           "' requires a gradient but has no gradient accumulator (is it a leaf?)");
    }
    State* state = &s;
    s.hook_keys.push_back(
        accumulator->add_post_hook(std::make_unique<GradientReadyHook>([state, i] { state->on_gradient(i); })));
    s.accumulators.push_back(std::move(accumulator));
  }
}

TorchDdp::~TorchDdp() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  for (size_t i = 0; i < s.accumulators.size(); ++i) s.accumulators[i]->del_post_hook(s.hook_keys[i]);
  // The views die with the Reducer's buckets: give each gradient memory of its own.
  for (size_t i = 0; i < s.params.size(); ++i) {
    torch::Tensor& grad = s.params[i].mutable_grad();
    if (grad.defined() && grad.is_same(s.views[i])) grad = s.views[i].clone();
  }
}

void TorchDdp::synchronize() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.start_step_locked();
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (!s.reported[i]) s.adopt_locked(i);
  }
  s.reducer->finalize();
  s.bind_views_locked();
  s.reported.assign(s.params.size(), false);
  s.ready = 0;
  s.step_started = false;
}

void TorchDdp::set_no_sync(bool no_sync) { state_->no_sync_wanted.store(no_sync); }

bool TorchDdp::no_sync() const { return state_->no_sync_wanted.load(); }

void TorchDdp::broadcast_buffers() { state_->reducer->broadcast_buffers(); }

size_t TorchDdp::num_parameters() const { return state_->params.size(); }

size_t TorchDdp::gradients_ready() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->ready;
}

Reducer& TorchDdp::reducer() { return *state_->reducer; }

}  // namespace braid::ddp
