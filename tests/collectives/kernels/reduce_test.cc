// Every dtype x op against a scalar reference, for each compiled ISA variant, every count of
// the sweep, in place and out of place, aligned and not.
#include "collectives/kernels/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/kernels/kernel_isa.h"
#include "tests/collectives/kernels/reference.h"

namespace braid::collectives {
namespace {

constexpr size_t kCounts[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};

std::vector<KernelIsa> isas() {
  std::vector<KernelIsa> out{KernelIsa::generic};
  const KernelIsa saved = active_kernel_isa();
  for (KernelIsa isa : {KernelIsa::avx2, KernelIsa::avx512}) {
    if (set_kernel_isa(isa)) out.push_back(isa);
  }
  set_kernel_isa(saved);
  return out;
}

enum class Layout { out_of_place, dst_is_a, dst_is_b, unaligned };
const char* to_string(Layout l) {
  switch (l) {
    case Layout::out_of_place: return "out_of_place";
    case Layout::dst_is_a: return "dst_is_a";
    case Layout::dst_is_b: return "dst_is_b";
    case Layout::unaligned: return "unaligned";
  }
  return "?";
}

class ReduceSweep : public ::testing::TestWithParam<std::tuple<DType, Op>> {};

TEST_P(ReduceSweep, MatchesReference) {
  const auto [dtype, op] = GetParam();
  const size_t es = dtype_size(dtype);
  std::mt19937_64 rng(static_cast<uint64_t>(dtype) * 131 + static_cast<uint64_t>(op));
  for (KernelIsa isa : isas()) {
    ASSERT_TRUE(set_kernel_isa(isa));
    for (size_t count : kCounts) {
      const std::vector<uint8_t> a = reference::random_values(dtype, op, count, rng);
      const std::vector<uint8_t> b = reference::random_values(dtype, op, count, rng);
      const std::vector<uint8_t> want = reference::reduce(dtype, op, a, b, count);
      for (Layout layout : {Layout::out_of_place, Layout::dst_is_a, Layout::dst_is_b, Layout::unaligned}) {
        SCOPED_TRACE(std::string(to_string(isa)) + " count " + std::to_string(count) + " " + to_string(layout));
        // One spare byte in front lets the unaligned layout shift every buffer off its element size.
        const size_t shift = layout == Layout::unaligned ? 1 : 0;
        std::vector<uint8_t> sa(count * es + 1), sb(count * es + 1), sd(count * es + 1, 0xAB);
        std::copy(a.begin(), a.end(), sa.begin() + static_cast<ptrdiff_t>(shift));
        std::copy(b.begin(), b.end(), sb.begin() + static_cast<ptrdiff_t>(shift));
        uint8_t* pa = sa.data() + shift;
        uint8_t* pb = sb.data() + shift;
        uint8_t* pd = layout == Layout::dst_is_a ? pa : layout == Layout::dst_is_b ? pb : sd.data() + shift;
        if (layout == Layout::dst_is_a) {
          reduce_into(pd, pb, count, dtype, op);
        } else {
          reduce_to(pd, pa, pb, count, dtype, op);
        }
        std::string diff = reference::first_difference(dtype, want.data(), pd, count);
        ASSERT_TRUE(diff.empty()) << diff;
        if (layout == Layout::out_of_place || layout == Layout::unaligned) {
          ASSERT_TRUE(std::equal(a.begin(), a.end(), pa)) << "a was modified";
          ASSERT_TRUE(std::equal(b.begin(), b.end(), pb)) << "b was modified";
        }
      }
    }
  }
  set_kernel_isa(isas().back());
}

std::vector<std::tuple<DType, Op>> sweep() {
  std::vector<std::tuple<DType, Op>> out;
  for (int d = 0; d < kNumDTypes; ++d) {
    for (Op op : {Op::sum, Op::prod, Op::min, Op::max, Op::band, Op::bor, Op::bxor}) {
      if (is_floating(static_cast<DType>(d)) && is_bitwise(op)) continue;
      out.emplace_back(static_cast<DType>(d), op);
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllDTypesAndOps, ReduceSweep, ::testing::ValuesIn(sweep()),
                         [](const ::testing::TestParamInfo<ReduceSweep::ParamType>& info) {
                           return std::string(braid::to_string(std::get<0>(info.param))) + "_" +
                                  braid::to_string(std::get<1>(info.param));
                         });

template <typename T>
std::vector<T> reduced(std::vector<T> a, const std::vector<T>& b, DType dtype, Op op) {
  reduce_into(a.data(), b.data(), a.size(), dtype, op);
  return a;
}

TEST(Reduce, IntegerSumAndProdWrap) {
  EXPECT_EQ(reduced<int8_t>({127, -128, 100}, {1, -1, 100}, DType::i8, Op::sum), (std::vector<int8_t>{-128, 127, -56}));
  EXPECT_EQ(reduced<uint8_t>({255, 200}, {1, 100}, DType::u8, Op::sum), (std::vector<uint8_t>{0, 44}));
  EXPECT_EQ(reduced<int32_t>({INT32_MAX, INT32_MIN}, {1, -1}, DType::i32, Op::sum),
            (std::vector<int32_t>{INT32_MIN, INT32_MAX}));
  EXPECT_EQ(reduced<int64_t>({INT64_MAX}, {2}, DType::i64, Op::prod), (std::vector<int64_t>{-2}));
  EXPECT_EQ(reduced<uint8_t>({16}, {17}, DType::u8, Op::prod), (std::vector<uint8_t>{16}));
  EXPECT_EQ(reduced<int8_t>({-128}, {-1}, DType::i8, Op::prod), (std::vector<int8_t>{-128}));
}

TEST(Reduce, MinMaxFollowSignedness) {
  EXPECT_EQ(reduced<int8_t>({-1, 5}, {1, -7}, DType::i8, Op::min), (std::vector<int8_t>{-1, -7}));
  EXPECT_EQ(reduced<uint8_t>({255, 5}, {1, 200}, DType::u8, Op::min), (std::vector<uint8_t>{1, 5}));
  EXPECT_EQ(reduced<int64_t>({INT64_MIN, 3}, {INT64_MAX, 4}, DType::i64, Op::max),
            (std::vector<int64_t>{INT64_MAX, 4}));
}

TEST(Reduce, FloatMinMaxPropagateNaN) {
  const float nan = std::nanf("");
  auto mn = reduced<float>({nan, 1.0f, 2.0f}, {1.0f, nan, 3.0f}, DType::f32, Op::min);
  EXPECT_TRUE(std::isnan(mn[0]));
  EXPECT_TRUE(std::isnan(mn[1]));
  EXPECT_EQ(mn[2], 2.0f);
}

}  // namespace
}  // namespace braid::collectives
