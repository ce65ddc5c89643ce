#include "tools/examples/mlp.h"

#include <algorithm>
#include <cmath>

#include "tools/examples/weight_init.h"

namespace braid::examples {

Mlp::Mlp(MlpShape shape, uint64_t seed) : shape_(shape) {
  params_[kW1].resize(shape.hidden * shape.inputs);
  params_[kB1].assign(shape.hidden, 0.0f);
  params_[kW2].resize(shape.classes * shape.hidden);
  params_[kB2].assign(shape.classes, 0.0f);
  uint64_t state = seed;
  const float a1 = std::sqrt(6.0f / static_cast<float>(shape.inputs + shape.hidden));
  const float a2 = std::sqrt(6.0f / static_cast<float>(shape.hidden + shape.classes));
  for (float& w : params_[kW1]) w = uniform(state, a1);
  for (float& w : params_[kW2]) w = uniform(state, a2);
}

void Mlp::forward_one(const float* x, float* h, float* p) const {
  const float* w1 = params_[kW1].data();
  const float* b1 = params_[kB1].data();
  const float* w2 = params_[kW2].data();
  const float* b2 = params_[kB2].data();
  for (size_t j = 0; j < shape_.hidden; ++j) {
    float s = b1[j];
    const float* row = w1 + j * shape_.inputs;
    for (size_t k = 0; k < shape_.inputs; ++k) s += row[k] * x[k];
    h[j] = s > 0 ? s : 0;
  }
  float top = -INFINITY;
  for (size_t c = 0; c < shape_.classes; ++c) {
    float s = b2[c];
    const float* row = w2 + c * shape_.hidden;
    for (size_t j = 0; j < shape_.hidden; ++j) s += row[j] * h[j];
    p[c] = s;
    top = std::max(top, s);
  }
  float total = 0;  // softmax, shifted by the largest logit so exp cannot overflow
  for (size_t c = 0; c < shape_.classes; ++c) total += (p[c] = std::exp(p[c] - top));
  for (size_t c = 0; c < shape_.classes; ++c) p[c] /= total;
}

Mlp::BatchStats Mlp::evaluate(const float* x, const int32_t* labels, size_t n) const {
  BatchStats stats;
  std::vector<float> h(shape_.hidden), p(shape_.classes);
  for (size_t i = 0; i < n; ++i) {
    forward_one(x + i * shape_.inputs, h.data(), p.data());
    const auto y = static_cast<size_t>(labels[i]);
    stats.loss_sum -= std::log(std::max(p[y], 1e-30f));
    stats.correct += static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin()) == y;
  }
  return stats;
}

Mlp::BatchStats Mlp::train_batch(const float* x, const int32_t* labels, size_t n, float scale, float* const* grads,
                                 const std::function<void(size_t)>& ready) {
  const size_t H = shape_.hidden, C = shape_.classes, D = shape_.inputs;
  BatchStats stats;
  // Forward for the whole batch first, keeping what backward needs: hidden activations and
  // dLoss/dlogits = scale * (p - onehot).
  std::vector<float> h(n * H), dz(n * C);
  for (size_t i = 0; i < n; ++i) {
    float* hi = h.data() + i * H;
    float* pi = dz.data() + i * C;
    forward_one(x + i * D, hi, pi);
    const auto y = static_cast<size_t>(labels[i]);
    stats.loss_sum -= std::log(std::max(pi[y], 1e-30f));
    stats.correct += static_cast<size_t>(std::max_element(pi, pi + C) - pi) == y;
    pi[y] -= 1.0f;
    for (size_t c = 0; c < C; ++c) pi[c] *= scale;
  }
  // Layer 2 gradients are final first, so their bucket can travel during layer 1's backward.
  for (size_t i = 0; i < n; ++i) {
    const float* hi = h.data() + i * H;
    const float* di = dz.data() + i * C;
    for (size_t c = 0; c < C; ++c) {
      float* row = grads[kW2] + c * H;
      for (size_t j = 0; j < H; ++j) row[j] += di[c] * hi[j];
      grads[kB2][c] += di[c];
    }
  }
  ready(kW2);
  ready(kB2);
  const float* w2 = params_[kW2].data();
  std::vector<float> dh(H);
  for (size_t i = 0; i < n; ++i) {
    const float* hi = h.data() + i * H;
    const float* di = dz.data() + i * C;
    const float* xi = x + i * D;
    for (size_t j = 0; j < H; ++j) {
      float s = 0;
      if (hi[j] > 0) {
        for (size_t c = 0; c < C; ++c) s += w2[c * H + j] * di[c];
      }
      dh[j] = s;
    }
    for (size_t j = 0; j < H; ++j) {
      if (dh[j] == 0) continue;
      float* row = grads[kW1] + j * D;
      for (size_t k = 0; k < D; ++k) row[k] += dh[j] * xi[k];
      grads[kB1][j] += dh[j];
    }
  }
  ready(kW1);
  ready(kB1);
  return stats;
}

void Mlp::sgd_step(float* const* grads, float lr) {
  for (size_t p = 0; p < kNumParams; ++p) {
    float* w = params_[p].data();
    for (size_t i = 0; i < params_[p].size(); ++i) w[i] -= lr * grads[p][i];
  }
}

}  // namespace braid::examples
