#include "bench/ddp/deep_mlp.h"

#include <algorithm>
#include <cmath>

#include "tools/examples/weight_init.h"

namespace braid::bench {
namespace {

using examples::uniform;

// c += a * b for row-major a (m x k), b (k x n), c (m x n).
//
// Every matrix product of this model goes through here, arranged (by the [in][out] weight
// layout and the transposes in backward) so that the innermost loop is c_row += s * b_row over
// contiguous memory: the compiler vectorizes that as it is, while a dot product would need
// -ffast-math to reorder its sum. b is walked in blocks of rows small enough to stay in cache
// while every row of a passes over them, so a 1 MiB weight is read from memory once per block
// instead of once per sample.
void add_product(size_t m, size_t k, size_t n, const float* a, const float* b, float* c) {
  const size_t block_rows = std::max<size_t>(1, (size_t{64} << 10) / (n * sizeof(float)));
  for (size_t k0 = 0; k0 < k; k0 += block_rows) {
    const size_t k1 = std::min(k, k0 + block_rows);
    for (size_t i = 0; i < m; ++i) {
      float* ci = c + i * n;
      const float* ai = a + i * k;
      for (size_t kk = k0; kk < k1; ++kk) {
        const float s = ai[kk];
        const float* bk = b + kk * n;
        for (size_t j = 0; j < n; ++j) ci[j] += s * bk[j];
      }
    }
  }
}

// out (cols x rows) = in (rows x cols) transposed.
void transpose(size_t rows, size_t cols, const float* in, float* out) {
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
}

}  // namespace

DeepMlp::DeepMlp(DeepMlpShape shape, uint64_t seed) : shape_(shape) {
  widths_.push_back(shape.inputs);
  widths_.insert(widths_.end(), shape.layers, shape.hidden);
  widths_.push_back(shape.classes);
  uint64_t state = seed;
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    const size_t in = widths_[l], out = widths_[l + 1];
    std::vector<float> w(in * out);
    const float a = std::sqrt(6.0f / static_cast<float>(in + out));
    for (float& v : w) v = uniform(state, a);
    params_.push_back(std::move(w));
    params_.emplace_back(out, 0.0f);
  }
}

size_t DeepMlp::total_count() const {
  size_t total = 0;
  for (const auto& p : params_) total += p.size();
  return total;
}

double DeepMlp::forward(const float* x, const int32_t* labels, size_t n, float scale) {
  const size_t L = shape_.layers;
  x_ = x;
  n_ = n;
  activations_.resize(L);
  const float* input = x;
  for (size_t l = 0; l <= L; ++l) {
    const size_t in = widths_[l], out = widths_[l + 1];
    std::vector<float>& z = l < L ? activations_[l] : output_delta_;
    z.resize(n * out);
    const float* b = params_[bias(l)].data();
    for (size_t i = 0; i < n; ++i) std::copy(b, b + out, z.begin() + static_cast<std::ptrdiff_t>(i * out));
    add_product(n, in, out, input, params_[weight(l)].data(), z.data());
    if (l < L) {
      for (float& v : z) v = v > 0 ? v : 0;
    }
    input = z.data();
  }
  // Softmax cross-entropy; output_delta_ turns from logits into scale * (p - onehot).
  const size_t C = shape_.classes;
  double loss = 0;
  for (size_t i = 0; i < n; ++i) {
    float* p = output_delta_.data() + i * C;
    const float top = *std::max_element(p, p + C);  // shifted so exp cannot overflow
    float total = 0;
    for (size_t c = 0; c < C; ++c) total += (p[c] = std::exp(p[c] - top));
    for (size_t c = 0; c < C; ++c) p[c] /= total;
    const auto y = static_cast<size_t>(labels[i]);
    loss -= std::log(std::max(p[y], 1e-30f));
    p[y] -= 1.0f;
    for (size_t c = 0; c < C; ++c) p[c] *= scale;
  }
  return loss;
}

void DeepMlp::backward(float* const* grads, const std::function<void(size_t)>& ready) {
  const size_t n = n_;
  std::vector<float> delta = output_delta_;  // dLoss/d(layer l's output before its ReLU)
  std::vector<float> delta_below, input_t, weight_t;
  for (size_t l = shape_.layers + 1; l-- > 0;) {
    const size_t in = widths_[l], out = widths_[l + 1];
    const float* input = l == 0 ? x_ : activations_[l - 1].data();
    // dW (in x out) += input^T (in x n) * delta (n x out); db += the column sums of delta.
    input_t.resize(in * n);
    transpose(n, in, input, input_t.data());
    add_product(in, n, out, input_t.data(), delta.data(), grads[weight(l)]);
    float* db = grads[bias(l)];
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < out; ++j) db[j] += delta[i * out + j];
    }
    // Bias first: a bucket closes as soon as a parameter takes it past its cap, and the large
    // weight should be that parameter, not leave its small bias a bucket of its own.
    ready(bias(l));
    ready(weight(l));
    if (l == 0) break;  // nobody needs the gradient of the input images
    // delta_below (n x in) = delta (n x out) * W^T (out x in), through the ReLU below: its
    // output (`input` here) is positive exactly where its derivative is 1.
    weight_t.resize(out * in);
    transpose(in, out, params_[weight(l)].data(), weight_t.data());
    delta_below.assign(n * in, 0.0f);
    add_product(n, out, in, delta.data(), weight_t.data(), delta_below.data());
    for (size_t k = 0; k < n * in; ++k) {
      if (!(input[k] > 0)) delta_below[k] = 0;
    }
    delta.swap(delta_below);
  }
}

void DeepMlp::sgd_step(float* const* grads, float lr) {
  for (size_t p = 0; p < params_.size(); ++p) {
    float* w = params_[p].data();
    for (size_t i = 0; i < params_[p].size(); ++i) w[i] -= lr * grads[p][i];
  }
}

}  // namespace braid::bench
