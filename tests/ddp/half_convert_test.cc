#include "ddp/half_convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

namespace braid::ddp {
namespace {

TEST(HalfConvert, F16ExactValuesRoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, -65504.0f, 0.000061035156f /* 2^-14 */, 5.9604645e-8f /* 2^-24 */}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  }
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(5.9604645e-8f), 0x0001);
}

TEST(HalfConvert, F16EveryEncodingRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto x = static_cast<uint16_t>(h);
    const float f = f16_to_f32(x);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), x) << std::hex << h;
  }
}

TEST(HalfConvert, F16RoundsToNearestEvenAndSaturatesToInfinity) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-10f + 0x1p-11f), 0x3c02);  // tie between odd and even: up
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // above the tie: up
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f32_to_f16(1e-9f), 0x0000);  // below half the smallest subnormal
}

TEST(HalfConvert, Bf16) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3e38f)), bf16_to_f32(f32_to_bf16(3e38f)));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
    }
  }
}

TEST(HalfConvert, ArraysRelativeError) {
  std::vector<float> src(1000), back(1000);
  std::vector<uint16_t> wire(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::sin(static_cast<float>(i)) * 100.0f;
  narrow_to_f16(src.data(), wire.data(), src.size());
  widen_from_f16(wire.data(), back.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) EXPECT_NEAR(back[i], src[i], std::fabs(src[i]) * 0x1p-11f + 1e-6f);
  narrow_to_bf16(src.data(), wire.data(), src.size());
  widen_from_bf16(wire.data(), back.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) EXPECT_NEAR(back[i], src[i], std::fabs(src[i]) * 0x1p-8f + 1e-6f);
}

}  // namespace
}  // namespace braid::ddp
