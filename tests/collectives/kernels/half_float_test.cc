// f16/bf16 conversions: exhaustive where cheap, rounding edge cases by name, and the same
// cases through reduce so the vectorized block path is checked too.
#include "collectives/kernels/half_float.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "collectives/kernels/kernel_isa.h"
#include "collectives/kernels/reduce.h"
#include "tests/collectives/kernels/reference.h"

namespace braid::collectives {
namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(HalfFloat, F16ToF32IsExactForEveryValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float want = reference::f16_to_float(static_cast<uint16_t>(h));
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(bits(got), bits(want)) << std::hex << h;
    }
  }
}

TEST(HalfFloat, BF16RoundTripsEveryValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t back = f32_to_bf16(bf16_to_f32(static_cast<uint16_t>(h)));
    if ((h & 0x7fffu) > 0x7f80u) {
      ASSERT_GT(back & 0x7fffu, 0x7f80u) << std::hex << h;  // NaN stays NaN
    } else {
      ASSERT_EQ(back, h) << std::hex << h;
    }
  }
}

// A stride through all 2^32 float bit patterns (odd, so every exponent and low bits vary).
TEST(HalfFloat, F32ToHalfMatchesReferenceAcrossAllExponents) {
  for (uint64_t u = 0; u <= 0xffffffffu; u += 65521) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(u));
    const uint16_t want16 = reference::float_to_f16(f), got16 = f32_to_f16(f);
    const uint16_t wantb = reference::float_to_bf16(f), gotb = f32_to_bf16(f);
    if (std::isnan(f)) {
      ASSERT_GT(got16 & 0x7fffu, 0x7c00u) << std::hex << u;
      ASSERT_GT(gotb & 0x7fffu, 0x7f80u) << std::hex << u;
    } else {
      ASSERT_EQ(got16, want16) << std::hex << u;
      ASSERT_EQ(gotb, wantb) << std::hex << u;
    }
  }
}

TEST(HalfFloat, F16RoundingCases) {
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);       // tie between 1 and 1+2^-10: even (1)
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);   // tie between odd and even: up to even
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // just above the tie
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);               // tie past the largest: to inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);               // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);               // tie with zero: even (0)
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);           // tie between 1 and 2 ulps: 2
  EXPECT_EQ(f32_to_f16(1023 * 0x1p-24f), 0x03ff);        // largest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);               // smallest normal
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_GT(f32_to_f16(std::bit_cast<float>(0x7f800001u)) & 0x7fffu, 0x7c00u);  // payload only in low bits
  EXPECT_EQ(bits(f16_to_f32(0x0001)), bits(0x1p-24f));
  EXPECT_EQ(bits(f16_to_f32(0xfc00)), bits(-INFINITY));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

TEST(HalfFloat, BF16RoundingCases) {
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);       // tie: even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);   // tie from odd: up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00008000u)), 0x0000);  // subnormal tie: even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_GT(f32_to_bf16(std::bit_cast<float>(0x7f800001u)) & 0x7fffu, 0x7f80u);  // must not become inf
  EXPECT_GT(f32_to_bf16(std::bit_cast<float>(0xffffffffu)) & 0x7fffu, 0x7f80u);
}

// The same ties through reduce_into, long enough to take the vectorized blocks, on every ISA.
TEST(HalfFloat, ReduceRoundsTiesToEven) {
  for (KernelIsa isa : {KernelIsa::generic, KernelIsa::avx2, KernelIsa::avx512}) {
    if (!set_kernel_isa(isa)) continue;
    SCOPED_TRACE(to_string(isa));
    const size_t n = 200;
    std::vector<uint16_t> a(n, 0x3f80), b(n, 0x3b80);  // bf16: 1 + 2^-8 -> tie -> 1
    reduce_into(a.data(), b.data(), n, DType::bf16, Op::sum);
    EXPECT_EQ(a, std::vector<uint16_t>(n, 0x3f80));
    std::vector<uint16_t> c(n, 0x3f81);  // (1 + 2^-7) + 2^-8 -> tie from odd -> 1 + 2^-6
    reduce_into(c.data(), b.data(), n, DType::bf16, Op::sum);
    EXPECT_EQ(c, std::vector<uint16_t>(n, 0x3f82));
    std::vector<uint16_t> h(n, 0x3c00), tiny(n, 0x1000);  // f16: 1 + 2^-11 -> tie -> 1
    reduce_into(h.data(), tiny.data(), n, DType::f16, Op::sum);
    EXPECT_EQ(h, std::vector<uint16_t>(n, 0x3c00));
    std::vector<uint16_t> sub(n, 0x0001), sub2(n, 0x0001);  // f16 subnormals add exactly
    reduce_into(sub.data(), sub2.data(), n, DType::f16, Op::sum);
    EXPECT_EQ(sub, std::vector<uint16_t>(n, 0x0002));
    std::vector<uint16_t> big(n, 0x7bff);  // 65504 + 65504 overflows to inf
    reduce_into(big.data(), big.data(), n, DType::f16, Op::sum);
    EXPECT_EQ(big, std::vector<uint16_t>(n, 0x7c00));
    std::vector<uint16_t> inf(n, 0x7c00), ninf(n, 0xfc00);  // inf + -inf is NaN
    reduce_into(inf.data(), ninf.data(), n, DType::f16, Op::sum);
    for (uint16_t v : inf) EXPECT_GT(v & 0x7fffu, 0x7c00u);
  }
}

}  // namespace
}  // namespace braid::collectives
