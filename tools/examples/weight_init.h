// tools/examples/weight_init.h - the deterministic random numbers the example models (and the
// DDP benchmark's deeper model) start their weights from: the same seed gives the same weights
// on every rank and in every single-process reference.
#pragma once

#include <cstdint>

namespace braid::examples {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [-a, a) from the top 24 bits (exactly representable in a float).
inline float uniform(uint64_t& state, float a) {
  const float u = static_cast<float>(splitmix64(state) >> 40) * 0x1p-24f;
  return (2.0f * u - 1.0f) * a;
}

}  // namespace braid::examples
