// scale() for every dtype and fill_identity() for every dtype x op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/kernels/half_float.h"
#include "collectives/kernels/reduce.h"
#include "tests/collectives/kernels/reference.h"

namespace braid::collectives {
namespace {

template <typename T>
std::vector<T> scaled(std::vector<T> v, DType dtype, double factor) {
  scale(v.data(), v.size(), dtype, factor);
  return v;
}

TEST(Scale, FloatingTypesMultiply) {
  EXPECT_EQ(scaled<float>({8.0f, -3.0f, 1.0f}, DType::f32, 0.25), (std::vector<float>{2.0f, -0.75f, 0.25f}));
  EXPECT_EQ(scaled<double>({9.0, -3.0}, DType::f64, 1.0 / 3), (std::vector<double>{9.0 / 3 * 1.0, -1.0}));
  // f16: 3 * 0.5 = 1.5 (0x3e00); bf16: 3 * 0.25 = 0.75 (0x3f40).
  EXPECT_EQ(scaled<uint16_t>({0x4200, 0x3c00}, DType::f16, 0.5), (std::vector<uint16_t>{0x3e00, 0x3800}));
  EXPECT_EQ(scaled<uint16_t>({0x4040}, DType::bf16, 0.25), (std::vector<uint16_t>{0x3f40}));
  // Long enough for the block path, in f32 and then rounded: 1/3 of 1.0 in bf16 is 0x3eab.
  std::vector<uint16_t> ones(1000, 0x3f80);
  EXPECT_EQ(scaled<uint16_t>(ones, DType::bf16, 1.0 / 3), std::vector<uint16_t>(1000, 0x3eab));
}

TEST(Scale, IntegersDivideTruncatingTowardZero) {
  EXPECT_EQ(scaled<int32_t>({7, -7, 8, INT32_MIN}, DType::i32, 0.5), (std::vector<int32_t>{3, -3, 4, INT32_MIN / 2}));
  EXPECT_EQ(scaled<int8_t>({-128, 127, -1}, DType::i8, 1.0 / 3), (std::vector<int8_t>{-42, 42, 0}));
  EXPECT_EQ(scaled<uint8_t>({255, 3}, DType::u8, 0.25), (std::vector<uint8_t>{63, 0}));
  EXPECT_EQ(scaled<int64_t>({INT64_MIN, 10}, DType::i64, 1.0 / 7), (std::vector<int64_t>{INT64_MIN / 7, 1}));
  EXPECT_EQ(scaled<int32_t>({5, -5}, DType::i32, 1.0), (std::vector<int32_t>{5, -5}));
}

TEST(Scale, UnalignedAndEmpty) {
  std::vector<uint8_t> raw(1 + 3 * sizeof(float));
  const float in[3] = {2.0f, 4.0f, -8.0f};
  std::memcpy(raw.data() + 1, in, sizeof(in));
  scale(raw.data() + 1, 3, DType::f32, 0.5);
  float out[3];
  std::memcpy(out, raw.data() + 1, sizeof(out));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[2], -4.0f);
  scale(nullptr, 0, DType::f32, 0.5);
}

// reduce(x, identity) == x for every dtype x op, checked against the reference reduction.
TEST(FillIdentity, IsTheIdentityOfEveryOp) {
  std::mt19937_64 rng(5);
  for (int d = 0; d < kNumDTypes; ++d) {
    const DType dtype = static_cast<DType>(d);
    for (Op op : {Op::sum, Op::prod, Op::min, Op::max, Op::avg, Op::band, Op::bor, Op::bxor}) {
      if (is_floating(dtype) && is_bitwise(op)) continue;
      SCOPED_TRACE(std::string(to_string(dtype)) + " " + to_string(op));
      const size_t n = 777;
      std::vector<uint8_t> x = reference::random_values(dtype, op, n, rng);
      std::vector<uint8_t> id(n * dtype_size(dtype), 0x5A);
      fill_identity(id.data(), n, dtype, op);
      std::vector<uint8_t> got = id;
      reduce_into(got.data(), x.data(), n, dtype, op);
      const std::string diff = reference::first_difference(dtype, x.data(), got.data(), n);
      EXPECT_TRUE(diff.empty()) << diff;
    }
  }
}

}  // namespace
}  // namespace braid::collectives
