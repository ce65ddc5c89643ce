// bench/ddp/deep_mlp.h - a perceptron with any number of equal hidden layers, for timing DDP.
//
// inputs -> [Linear(hidden) -> ReLU] x layers -> Linear(classes) -> softmax cross-entropy.
// With layers == 1 it has the example's shape (tools/examples/mlp.h). It exists because that
// model cannot show overlap: its first layer holds ~99% of the gradient and backward finishes
// that gradient last, so nothing is left to compute while it travels. With several equal
// hidden layers the gradient is spread over layers that become ready one after another, the
// shape of the networks DDP is made for.
//
// Forward and backward are separate calls so the benchmark can time them apart. One thread,
// no hidden parallelism: the benchmark runs one compute thread per rank on purpose.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace braid::bench {

struct DeepMlpShape {
  size_t inputs = 784;
  size_t hidden = 512;
  size_t layers = 8;  // hidden layers, each `hidden` wide
  size_t classes = 10;
};

class DeepMlp {
 public:
  // Glorot-uniform weights and zero biases from a deterministic generator (equal seeds, equal
  // models). Parameters are registered layer by layer: weight 2l, then bias 2l + 1.
  DeepMlp(DeepMlpShape shape, uint64_t seed);

  const DeepMlpShape& shape() const { return shape_; }
  size_t num_params() const { return params_.size(); }
  float* param(size_t i) { return params_[i].data(); }
  size_t param_count(size_t i) const { return params_[i].size(); }
  size_t total_count() const;  // elements of all parameters together
  // Elements of the first layer's weight and bias: the gradient backward finishes last.
  size_t first_layer_count() const { return params_[weight(0)].size() + params_[bias(0)].size(); }

  // Forward over n samples (n rows of `inputs` floats, labels in [0, classes)), keeping what
  // backward needs; the loss being differentiated is scale * (sum of the n losses). `x` must
  // stay valid until backward() returns. Returns the summed loss.
  double forward(const float* x, const int32_t* labels, size_t n, float scale);

  // Adds the gradient of the last forward()'s loss into grads[i] (param_count(i) floats each)
  // and calls ready(i) the moment grads[i] is final: last layer first, as autograd hooks fire,
  // each layer (its bias, then its weight) before the layer below is computed.
  void backward(float* const* grads, const std::function<void(size_t)>& ready);

  // params -= lr * grads
  void sgd_step(float* const* grads, float lr);

 private:
  size_t weight(size_t layer) const { return 2 * layer; }
  size_t bias(size_t layer) const { return 2 * layer + 1; }

  DeepMlpShape shape_;
  std::vector<size_t> widths_;              // widths_[l] -> widths_[l + 1] is Linear l
  std::vector<std::vector<float>> params_;  // weights stored [in][out]: see deep_mlp.cc
  // Kept by forward() for backward().
  const float* x_ = nullptr;
  size_t n_ = 0;
  std::vector<std::vector<float>> activations_;  // after each hidden layer's ReLU, n x hidden
  std::vector<float> output_delta_;              // dLoss/dlogits, n x classes
};

}  // namespace braid::bench
