// tools/examples/mlp.h - a two-layer perceptron with its own forward and backward pass.
//
// inputs -> Linear(hidden) -> ReLU -> Linear(classes) -> softmax cross-entropy. Small and
// dependency-free on purpose: the DDP example and the DDP tests train it, and a test computes
// the single-process reference with the very same code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace braid::examples {

struct MlpShape {
  size_t inputs = 784;
  size_t hidden = 128;
  size_t classes = 10;
};

class Mlp {
 public:
  // Registration order of the parameters (the Reducer's indices).
  enum ParamIndex : size_t { kW1, kB1, kW2, kB2, kNumParams };

  // Glorot-uniform weights, zero biases, from a deterministic generator: equal seeds give
  // bit-identical models on every rank and platform.
  Mlp(MlpShape shape, uint64_t seed);

  const MlpShape& shape() const { return shape_; }
  float* param(size_t i) { return params_[i].data(); }
  const float* param(size_t i) const { return params_[i].data(); }
  size_t param_count(size_t i) const { return params_[i].size(); }

  struct BatchStats {
    double loss_sum = 0;  // sum over the batch of -log p(label)
    size_t correct = 0;   // argmax == label
  };

  // x: n rows of `inputs` floats; labels in [0, classes).
  BatchStats evaluate(const float* x, const int32_t* labels, size_t n) const;

  // Forward and backward: adds the gradient of scale * (sum of the batch's losses) into
  // grads[i] (each of param_count(i) floats) and calls ready(i) as soon as grads[i] is final,
  // last layer first, the way autograd hooks fire.
  BatchStats train_batch(const float* x, const int32_t* labels, size_t n, float scale, float* const* grads,
                         const std::function<void(size_t)>& ready);

  // params -= lr * grads
  void sgd_step(float* const* grads, float lr);

 private:
  void forward_one(const float* x, float* h, float* p) const;  // hidden activations, probabilities

  MlpShape shape_;
  std::vector<float> params_[kNumParams];
};

}  // namespace braid::examples
