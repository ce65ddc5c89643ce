// The Reducer's state machine. Per step: every parameter starts not ready; mark_ready()
// counts a bucket down; a bucket whose count reaches zero starts once all buckets before it
// have started (collectives must be issued in the same order on every rank, whatever order the
// gradients arrive in locally); finalize() fills in the parameters nobody marked, starts the
// rest, and waits in bucket order.
#include "braid/ddp/reducer.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "braid/error.h"

namespace braid::ddp {

struct Reducer::BucketState {
  std::vector<float> storage;  // the flat gradients the collective runs on
  size_t pending = 0;          // parameters of this bucket not yet ready in this step
  bool launched = false;
  bool waited = false;
  Work work;
};

Reducer::Reducer(Communicator& comm, std::vector<Parameter> params, ReducerOptions options)
    : comm_(comm), params_(std::move(params)), options_(std::move(options)) {
  hook_ = options_.hook ? options_.hook : average_hook();
  std::vector<TensorRef> model;
  std::vector<ParamSpec> specs;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Parameter& p = params_[i];
    if (p.count > 0 && p.data == nullptr) {
      throw Error(ErrorCode::invalid_argument,
                  "ddp: parameter " + std::to_string(i) + " has " + std::to_string(p.count) + " elements but no data");
    }
    model.push_back(TensorRef{.data = p.data, .count = p.count, .dtype = DType::f32});
    specs.push_back(ParamSpec{.count = p.count, .dtype = DType::f32});
  }
  model.insert(model.end(), options_.buffers.begin(), options_.buffers.end());
  verify_same_layout(comm_, model);
  if (options_.broadcast_parameters) broadcast_coalesced(comm_, model, 0, options_.buckets.bucket_bytes);

  ready_.assign(params_.size(), false);
  touched_.assign(params_.size(), false);
  owned_grad_.assign(params_.size(), nullptr);
  BucketPlan plan = assign_buckets(specs, options_.buckets);
  layout_storage(plan, /*keep_values=*/false);
  plan_ = std::move(plan);
  reset_step();
}

Reducer::~Reducer() {
  // A step abandoned by an exception may leave collectives running on our storage.
  for (auto& b : buckets_) {
    if (b->launched && !b->waited) {
      try {
        b->work.wait();
      } catch (const Error&) {  // already reported, or the program is unwinding anyway
      }
    }
  }
}

float* Reducer::grad(size_t i) {
  if (i >= params_.size()) {
    throw Error(ErrorCode::invalid_argument,
                "ddp: grad(" + std::to_string(i) + "): there are " + std::to_string(params_.size()) + " parameters");
  }
  return owned_grad_[i] ? owned_grad_[i] : params_[i].grad;
}

void Reducer::zero_grad() {
  check_usable("zero_grad");
  for (size_t i = 0; i < params_.size(); ++i) {
    if (float* g = grad(i); g && params_[i].count) std::memset(g, 0, params_[i].count * sizeof(float));
  }
}

void Reducer::set_no_sync(bool no_sync) {
  if (std::find(ready_.begin(), ready_.end(), true) != ready_.end()) {
    throw Error(ErrorCode::invalid_argument,
                "ddp: set_no_sync in the middle of a step (after mark_ready, before finalize)");
  }
  no_sync_ = no_sync;
}

void Reducer::mark_ready(size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable("mark_ready");
  if (i >= params_.size()) {
    throw Error(ErrorCode::invalid_argument, "ddp: mark_ready(" + std::to_string(i) + "): there are " +
                                                 std::to_string(params_.size()) + " parameters");
  }
  if (ready_[i]) {
    throw Error(ErrorCode::invalid_argument, "ddp: parameter " + std::to_string(i) + " marked ready twice in step " +
                                                 std::to_string(synced_steps_) +
                                                 " (each parameter's gradient is final once per step)");
  }
  ready_[i] = true;
  touched_[i] = true;
  if (no_sync_) return;
  if (options_.rebuild_buckets && !rebuilt_) ready_order_.push_back(i);
  --buckets_[plan_.where[i].bucket]->pending;
  launch_ready_locked();
}

void Reducer::finalize() {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable("finalize");
  if (no_sync_) {
    ready_.assign(params_.size(), false);
    return;
  }
  for (size_t p = 0; p < params_.size(); ++p) {
    if (ready_[p]) continue;
    // No gradient this step: it contributes zeros, unless no_sync steps since the last
    // reduction accumulated something for it.
    if (!touched_[p]) {
      if (float* g = grad(p); g && params_[p].count) std::memset(g, 0, params_[p].count * sizeof(float));
    }
    ready_[p] = true;
    --buckets_[plan_.where[p].bucket]->pending;
  }
  launch_ready_locked();
  for (size_t b = 0; b < buckets_.size(); ++b) wait_bucket(b);
  ++synced_steps_;
  if (options_.rebuild_buckets && !rebuilt_) {
    rebuilt_ = true;
    try {
      rebuild();
    } catch (const Error& e) {
      fail(e.code(), std::string("ddp: rebuilding buckets after step 0 failed: ") + e.what());
    }
  }
  touched_.assign(params_.size(), false);
  reset_step();
}

void Reducer::broadcast_buffers() {
  check_usable("broadcast_buffers");
  broadcast_coalesced(comm_, options_.buffers, 0, options_.buckets.bucket_bytes);
}

void Reducer::check_usable(const char* op) const {
  if (!failure_.empty()) {
    throw Error(ErrorCode::aborted, std::string("ddp: Reducer::") + op + " after an earlier failure: " + failure_);
  }
}

void Reducer::fail(ErrorCode code, const std::string& message) {
  if (failure_.empty()) failure_ = message;
  throw Error(code, message);
}

void Reducer::launch_ready_locked() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) launch_locked(next_launch_++);
}

void Reducer::launch_locked(size_t b) {
  BucketState& state = *buckets_[b];
  const Bucket& bucket = plan_.buckets[b];
  for (const BucketSlot& s : bucket.slots) {  // caller-owned gradients travel in a copy
    if (!owned_grad_[s.param] && s.count) {
      std::memcpy(state.storage.data() + s.offset, params_[s.param].grad, s.count * sizeof(float));
    }
  }
  try {
    state.work = hook_->start(comm_, BucketView{.index = b, .data = state.storage.data(), .count = bucket.count});
  } catch (const Error& e) {
    fail(e.code(),
         "ddp: step " + std::to_string(synced_steps_) + ": could not start " + describe_bucket(b) + ": " + e.what());
  }
  state.launched = true;
}

void Reducer::wait_bucket(size_t b) {
  BucketState& state = *buckets_[b];
  const Bucket& bucket = plan_.buckets[b];
  try {
    state.waited = true;
    state.work.wait();
    hook_->finish(comm_, BucketView{.index = b, .data = state.storage.data(), .count = bucket.count});
  } catch (const Error& e) {
    fail(e.code(), "ddp: step " + std::to_string(synced_steps_) + ": " + describe_bucket(b) + " failed on rank " +
                       std::to_string(comm_.rank()) + " of " + std::to_string(comm_.size()) + ": " + e.what());
  }
  for (const BucketSlot& s : bucket.slots) {
    if (!owned_grad_[s.param] && s.count) {
      std::memcpy(params_[s.param].grad, state.storage.data() + s.offset, s.count * sizeof(float));
    }
  }
}

void Reducer::rebuild() {
  // Rank 0's order decides: buckets must be identical everywhere, and local orders can differ.
  std::vector<bool> seen(params_.size(), false);
  std::vector<int64_t> order;
  order.reserve(params_.size());
  for (size_t p : ready_order_) {
    order.push_back(static_cast<int64_t>(p));
    seen[p] = true;
  }
  for (size_t p = params_.size(); p-- > 0;) {  // never marked (unused): reverse registration order
    if (!seen[p]) order.push_back(static_cast<int64_t>(p));
  }
  ready_order_.clear();
  ready_order_.shrink_to_fit();
  comm_.broadcast(order.data(), order.size(), DType::i64, 0);

  std::vector<ParamSpec> specs;
  for (const Parameter& p : params_) specs.push_back(ParamSpec{.count = p.count, .dtype = DType::f32});
  std::vector<size_t> new_order(order.begin(), order.end());
  BucketPlan plan = assign_buckets(specs, options_.buckets, new_order);

  bool same = plan.buckets.size() == plan_.buckets.size();
  for (size_t b = 0; same && b < plan.buckets.size(); ++b) {
    const auto& x = plan.buckets[b].slots;
    const auto& y = plan_.buckets[b].slots;
    same =
        x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(),
                                           [](const BucketSlot& a, const BucketSlot& c) { return a.param == c.param; });
  }
  if (same) return;
  layout_storage(plan, /*keep_values=*/true);
  plan_ = std::move(plan);
  ++rebuilds_;
}

void Reducer::layout_storage(const BucketPlan& plan, bool keep_values) {
  std::vector<std::unique_ptr<BucketState>> buckets;
  std::vector<float*> views(params_.size(), nullptr);
  for (const Bucket& b : plan.buckets) {
    auto state = std::make_unique<BucketState>();
    state->storage.assign(b.count, 0.0f);
    for (const BucketSlot& s : b.slots) {
      if (params_[s.param].grad != nullptr) continue;
      views[s.param] = state->storage.data() + s.offset;
      if (keep_values && s.count) std::memcpy(views[s.param], owned_grad_[s.param], s.count * sizeof(float));
    }
    buckets.push_back(std::move(state));
  }
  buckets_ = std::move(buckets);
  owned_grad_ = std::move(views);
}

void Reducer::reset_step() {
  ready_.assign(params_.size(), false);
  next_launch_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    BucketState& s = *buckets_[b];
    s.pending = plan_.buckets[b].slots.size();
    s.launched = false;
    s.waited = false;
    s.work = Work();
  }
}

std::string Reducer::describe_bucket(size_t b) const {
  const Bucket& bucket = plan_.buckets[b];
  return "all_reduce of gradient bucket " + std::to_string(b) + " of " + std::to_string(plan_.buckets.size()) + " (" +
         std::to_string(bucket.slots.size()) + " parameters, " + std::to_string(bucket.count) + " f32, hook " +
         hook_->name() + ")";
}

}  // namespace braid::ddp
