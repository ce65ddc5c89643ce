// ddp/half_convert.h - f32 <-> f16 / bf16 for compressing buckets, round to nearest even.
//
// ddp/ sees only the public API, so it carries its own conversions (the collectives' kernels
// have faster ones of their own).
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::ddp {

uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

void narrow_to_f16(const float* src, uint16_t* dst, size_t n);
void widen_from_f16(const uint16_t* src, float* dst, size_t n);
void narrow_to_bf16(const float* src, uint16_t* dst, size_t n);
void widen_from_bf16(const uint16_t* src, float* dst, size_t n);

}  // namespace braid::ddp
