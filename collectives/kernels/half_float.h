// collectives/kernels/half_float.h - f16 and bf16 <-> f32, written branch-free.
//
// Every function is a chain of integer/float operations and selects, with no branches, so
// that a loop over a block of elements vectorizes: the kernels convert blocks into f32 stack
// buffers, reduce there, and round back. Rounding is to nearest, ties to even; NaN stays NaN
// (made quiet); overflow gives infinity; f16 subnormals are produced and read exactly.
#pragma once

#include <bit>
#include <cstdint>

// Forced inline: the kernels are compiled once per ISA, and an out-of-line copy built with
// AVX2 must never be the one the linker keeps for the baseline build.
#define BRAID_HALF_INLINE [[gnu::always_inline]] inline

namespace braid::collectives {

BRAID_HALF_INLINE float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// The rounded bf16 in the upper 16 bits (the lower 16 are garbage): the kernels that keep
// two bf16 per 32-bit lane use it to round without any narrowing shuffle.
BRAID_HALF_INLINE uint32_t f32_to_bf16_high(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  // Adding 0x7fff plus the lowest kept bit rounds the dropped half to nearest even; a carry
  // runs into the exponent, which is exactly what rounding up to the next binade needs.
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  // NaN: keep sign and payload, set the quiet bit so no payload truncates to infinity. The
  // signed compare is one instruction per vector, and both sides are below 2^31.
  const uint32_t quiet_nan = u | 0x00400000u;
  const bool is_nan = static_cast<int32_t>(u & 0x7fffffffu) > 0x7f800000;
  return is_nan ? quiet_nan : rounded;
}

BRAID_HALF_INLINE uint16_t f32_to_bf16(float f) { return static_cast<uint16_t>(f32_to_bf16_high(f) >> 16); }

BRAID_HALF_INLINE float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int32_t em = h & 0x7fff;  // exponent and mantissa (signed: compares vectorize best)
  // Rebias the exponent (15 -> 127): +112 binades; inf/NaN (exponent 31) must land on 255.
  const uint32_t normal = (static_cast<uint32_t>(em) << 13) + (112u << 23);
  const uint32_t inf_nan = (static_cast<uint32_t>(em) << 13) + (224u << 23);
  // A subnormal is mantissa * 2^-24, exact in f32.
  const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(em) * 0x1p-24f);
  const uint32_t magnitude = em >= 0x7c00 ? inf_nan : (em >= 0x0400 ? normal : subnormal);
  return std::bit_cast<float>(sign | magnitude);
}

BRAID_HALF_INLINE uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // Normal results: drop 13 mantissa bits with round-to-nearest-even, rebias 127 -> 15.
  const uint32_t normal = ((a - (112u << 23)) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // Results below 2^-14: adding 0.5 lines the f16 subnormal ulp (2^-24) up with the f32 ulp
  // of 0.5, so the FPU's own rounding of the sum is the round-to-nearest-even we need.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(a) + std::bit_cast<float>(126u << 23)) - (126u << 23);
  // 0x477ff000 = 65520, halfway between the largest f16 (65504, odd mantissa) and 2^16:
  // from there on, round-to-even goes to infinity.
  const int32_t sa = static_cast<int32_t>(a);  // below 2^31: signed compares, one instruction each
  uint32_t magnitude = sa >= 0x477ff000 ? 0x7c00u : (sa >= 0x38800000 ? normal : subnormal);
  magnitude = sa > 0x7f800000 ? (0x7e00u | ((a >> 13) & 0x3ffu)) : magnitude;
  return static_cast<uint16_t>(sign | magnitude);
}

}  // namespace braid::collectives
