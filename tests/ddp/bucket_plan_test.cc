#include "braid/ddp/bucket_plan.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "braid/error.h"

namespace braid::ddp {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::vector<ParamSpec> f32_params(const std::vector<size_t>& counts) {
  std::vector<ParamSpec> p;
  for (size_t c : counts) p.push_back(ParamSpec{.count = c, .dtype = DType::f32});
  return p;
}

// Every parameter once, slots contiguous from 0, `where` pointing back at the right slot.
void expect_consistent(const std::vector<ParamSpec>& params, const BucketPlan& plan) {
  ASSERT_EQ(plan.where.size(), params.size());
  std::vector<int> seen(params.size(), 0);
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    const Bucket& bucket = plan.buckets[b];
    size_t offset = 0;
    EXPECT_FALSE(bucket.slots.empty());
    for (size_t s = 0; s < bucket.slots.size(); ++s) {
      const BucketSlot& slot = bucket.slots[s];
      ASSERT_LT(slot.param, params.size());
      ++seen[slot.param];
      EXPECT_EQ(slot.offset, offset);
      EXPECT_EQ(slot.count, params[slot.param].count);
      EXPECT_EQ(bucket.dtype, params[slot.param].dtype);
      EXPECT_EQ(plan.where[slot.param].bucket, b);
      EXPECT_EQ(plan.where[slot.param].slot, s);
      offset += slot.count;
    }
    EXPECT_EQ(bucket.count, offset);
  }
  for (size_t p = 0; p < params.size(); ++p) EXPECT_EQ(seen[p], 1) << "parameter " << p;
}

TEST(BucketPlan, EmptyModelHasNoBuckets) {
  BucketPlan plan = assign_buckets({});
  EXPECT_TRUE(plan.buckets.empty());
  EXPECT_TRUE(plan.where.empty());
}

TEST(BucketPlan, SmallModelIsOneBucketInReverseOrder) {
  auto params = f32_params({10, 20, 30});
  BucketPlan plan = assign_buckets(params);
  expect_consistent(params, plan);
  ASSERT_EQ(plan.buckets.size(), 1u);
  const auto& slots = plan.buckets[0].slots;
  ASSERT_EQ(slots.size(), 3u);
  EXPECT_EQ(slots[0].param, 2u);
  EXPECT_EQ(slots[1].param, 1u);
  EXPECT_EQ(slots[2].param, 0u);
  EXPECT_EQ(slots[1].offset, 30u);
  EXPECT_EQ(slots[2].offset, 50u);
  EXPECT_EQ(plan.buckets[0].bytes(), 60u * 4);
}

TEST(BucketPlan, FirstBucketSmallThenLargeCap) {
  // 64 parameters of 1 MiB of f32 each (262144 elements): the first bucket closes after one
  // parameter (1 MiB cap), every later one after 25.
  auto params = f32_params(std::vector<size_t>(64, kMiB / 4));
  BucketPlan plan = assign_buckets(params);
  expect_consistent(params, plan);
  ASSERT_EQ(plan.buckets.size(), 4u);  // 1 + 25 + 25 + 13
  EXPECT_EQ(plan.buckets[0].slots.size(), 1u);
  EXPECT_EQ(plan.buckets[0].slots[0].param, 63u);
  EXPECT_EQ(plan.buckets[1].slots.size(), 25u);
  EXPECT_EQ(plan.buckets[2].slots.size(), 25u);
  EXPECT_EQ(plan.buckets[3].slots.size(), 13u);
  EXPECT_EQ(plan.buckets[3].slots.back().param, 0u);
}

TEST(BucketPlan, CapsAreConfigurable) {
  auto params = f32_params({4, 4, 4, 4, 4, 4, 4, 4});  // 16 bytes each
  BucketPlan plan = assign_buckets(params, BucketOptions{.first_bucket_bytes = 16, .bucket_bytes = 40});
  expect_consistent(params, plan);
  // 16 bytes reach the first cap at once; later buckets close at 48 >= 40, after three.
  ASSERT_EQ(plan.buckets.size(), 4u);
  EXPECT_EQ(plan.buckets[0].slots.size(), 1u);
  EXPECT_EQ(plan.buckets[1].slots.size(), 3u);
  EXPECT_EQ(plan.buckets[2].slots.size(), 3u);
  EXPECT_EQ(plan.buckets[3].slots.size(), 1u);
}

TEST(BucketPlan, OversizedParameterGetsItsOwnBucket) {
  auto params = f32_params({1, 1000, 1});
  BucketPlan plan = assign_buckets(params, BucketOptions{.first_bucket_bytes = 8, .bucket_bytes = 8});
  expect_consistent(params, plan);
  ASSERT_EQ(plan.buckets.size(), 2u);  // {2, 1}: closes at 4004 bytes; then {0}
  EXPECT_EQ(plan.buckets[0].slots.size(), 2u);
  EXPECT_EQ(plan.buckets[0].bytes(), 4004u);
  EXPECT_EQ(plan.buckets[1].slots[0].param, 0u);
}

TEST(BucketPlan, DTypesNeverShareABucket) {
  std::vector<ParamSpec> params = {{.count = 8, .dtype = DType::f32},
                                   {.count = 8, .dtype = DType::bf16},
                                   {.count = 8, .dtype = DType::f32},
                                   {.count = 8, .dtype = DType::f64}};
  BucketPlan plan = assign_buckets(params);
  expect_consistent(params, plan);
  ASSERT_EQ(plan.buckets.size(), 3u);
  // Ordered by the first parameter each bucket receives in reverse order: f64 (3), f32 (2), bf16 (1).
  EXPECT_EQ(plan.buckets[0].dtype, DType::f64);
  EXPECT_EQ(plan.buckets[1].dtype, DType::f32);
  EXPECT_EQ(plan.buckets[1].slots.size(), 2u);
  EXPECT_EQ(plan.buckets[2].dtype, DType::bf16);
  EXPECT_EQ(plan.buckets[2].bytes(), 16u);
}

TEST(BucketPlan, ExplicitOrderIsFollowed) {
  auto params = f32_params({4, 4, 4, 4});
  BucketPlan plan = assign_buckets(params, BucketOptions{.first_bucket_bytes = 32, .bucket_bytes = 32}, {1, 3, 0, 2});
  expect_consistent(params, plan);
  ASSERT_EQ(plan.buckets.size(), 2u);
  EXPECT_EQ(plan.buckets[0].slots[0].param, 1u);
  EXPECT_EQ(plan.buckets[0].slots[1].param, 3u);
  EXPECT_EQ(plan.buckets[1].slots[0].param, 0u);
  EXPECT_EQ(plan.buckets[1].slots[1].param, 2u);
}

TEST(BucketPlan, ZeroSizedParametersStillHaveASlot) {
  auto params = f32_params({0, 5, 0});
  BucketPlan plan = assign_buckets(params);
  expect_consistent(params, plan);
  EXPECT_EQ(plan.buckets.size(), 1u);
  EXPECT_EQ(plan.buckets[0].count, 5u);
}

TEST(BucketPlan, BadOrderOrCapsAreRejected) {
  auto params = f32_params({1, 2, 3});
  EXPECT_THROW(assign_buckets(params, {}, {0, 1}), Error);
  EXPECT_THROW(assign_buckets(params, {}, {0, 1, 1}), Error);
  EXPECT_THROW(assign_buckets(params, {}, {0, 1, 7}), Error);
  EXPECT_THROW(assign_buckets(params, BucketOptions{.first_bucket_bytes = 0}), Error);
  try {
    (void)assign_buckets(params, {}, {0, 2, 2});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("index 2 repeated"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid::ddp
