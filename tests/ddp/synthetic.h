// tests/ddp/synthetic.h - the data and the training recipe both the rank processes and the
// single-process reference use, so they can only differ by what DDP does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tools/examples/mlp.h"

namespace braid::ddp::testing {

inline constexpr uint64_t kModelSeed = 7;
inline constexpr size_t kAuxCount = 7;  // the extra parameter the unused-parameter test drives
inline constexpr float kAuxInit = 1.0f;

inline examples::MlpShape small_shape(size_t hidden = 16) { return {.inputs = 20, .hidden = hidden, .classes = 5}; }

struct Samples {
  std::vector<float> x;    // n * inputs
  std::vector<int32_t> y;  // n
};

// Sample i is a pure function of i: any process can produce any slice.
inline Samples make_samples(size_t first, size_t n, const examples::MlpShape& shape) {
  Samples s;
  s.x.resize(n * shape.inputs);
  s.y.resize(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t state = (first + i) * 0x9e3779b97f4a7c15ULL + 12345;
    for (size_t k = 0; k < shape.inputs; ++k) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      s.x[i * shape.inputs + k] = static_cast<float>(state >> 40) * 0x1p-24f * 2.0f - 1.0f;
    }
    // A learnable label: which of the first `classes` inputs is largest.
    size_t best = 0;
    for (size_t c = 1; c < shape.classes; ++c) {
      if (s.x[i * shape.inputs + c] > s.x[i * shape.inputs + best]) best = c;
    }
    s.y[i] = static_cast<int32_t>(best);
  }
  return s;
}

// The gradient rank `rank` gives the aux parameter in optimizer step `step` (the same for each
// element), or 0 with *used == false when it gives none: ranks take turns leaving it unused.
inline float aux_gradient(size_t step, size_t rank, bool* used) {
  *used = (step + rank) % 2 == 0;
  return *used ? static_cast<float>(rank + 1) : 0.0f;
}

}  // namespace braid::ddp::testing
