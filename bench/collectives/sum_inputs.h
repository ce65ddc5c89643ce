// bench/collectives/sum_inputs.h - the operands the reduction benchmarks sum (host and device).
//
// 1.0 + 0.001 in every element: the sums stay ordinary numbers, so no inf/NaN/subnormal slow
// path skews a figure. f32 or bf16 (the two types the benchmarks time).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "braid/types.h"
#include "collectives/kernels/half_float.h"

namespace braid::bench {

inline void fill_sum_inputs(DType type, size_t bytes, std::vector<uint8_t>* a, std::vector<uint8_t>* b) {
  a->assign(bytes, 0);
  b->assign(bytes, 0);
  const size_t size = dtype_size(type), count = bytes / size;
  for (size_t i = 0; i < count; ++i) {
    if (type == DType::f32) {
      const float one = 1.0f, tiny = 1e-3f;
      std::memcpy(a->data() + 4 * i, &one, 4);
      std::memcpy(b->data() + 4 * i, &tiny, 4);
    } else {
      const uint16_t one = collectives::f32_to_bf16(1.0f), tiny = collectives::f32_to_bf16(1e-3f);
      std::memcpy(a->data() + 2 * i, &one, 2);
      std::memcpy(b->data() + 2 * i, &tiny, 2);
    }
  }
}

}  // namespace braid::bench
