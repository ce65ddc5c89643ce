#include "braid/ddp/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "braid/error.h"

namespace braid::ddp {
namespace {

std::vector<std::vector<size_t>> shards(size_t dataset, size_t n, bool shuffle, bool drop_last, uint64_t epoch = 0) {
  std::vector<std::vector<size_t>> out;
  for (size_t r = 0; r < n; ++r) {
    DistributedSampler s(
        dataset, SamplerOptions{.num_replicas = n, .rank = r, .shuffle = shuffle, .seed = 42, .drop_last = drop_last});
    s.set_epoch(epoch);
    out.push_back(s.indices());
    EXPECT_EQ(out.back().size(), s.num_samples());
  }
  return out;
}

TEST(DistributedSampler, ShardsAreDisjointAndCoverTheDataset) {
  for (size_t n : {1, 2, 3, 4, 7}) {
    for (bool shuffle : {false, true}) {
      auto all = shards(84, n, shuffle, false);  // 84 divides by 1,2,3,4,7: no padding
      std::multiset<size_t> seen;
      for (auto& s : all) {
        EXPECT_EQ(s.size(), 84 / n);
        seen.insert(s.begin(), s.end());
      }
      EXPECT_EQ(seen.size(), 84u);
      for (size_t i = 0; i < 84; ++i) EXPECT_EQ(seen.count(i), 1u) << "n=" << n << " index " << i;
    }
  }
}

TEST(DistributedSampler, PaddingWrapsAroundToEqualLength) {
  auto all = shards(10, 4, false, false);  // 12 slots: indices 0..9 then 0, 1 again
  for (auto& s : all) EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(all[0], (std::vector<size_t>{0, 4, 8}));
  EXPECT_EQ(all[1], (std::vector<size_t>{1, 5, 9}));
  EXPECT_EQ(all[2], (std::vector<size_t>{2, 6, 0}));
  EXPECT_EQ(all[3], (std::vector<size_t>{3, 7, 1}));
}

TEST(DistributedSampler, TinyDatasetWrapsMoreThanOnce) {
  auto all = shards(2, 5, false, false);
  std::vector<size_t> got;
  for (auto& s : all) {
    ASSERT_EQ(s.size(), 1u);
    got.push_back(s[0]);
  }
  EXPECT_EQ(got, (std::vector<size_t>{0, 1, 0, 1, 0}));
}

TEST(DistributedSampler, DropLastTruncates) {
  auto all = shards(10, 4, true, true);
  std::set<size_t> seen;
  for (auto& s : all) {
    EXPECT_EQ(s.size(), 2u);
    seen.insert(s.begin(), s.end());
  }
  EXPECT_EQ(seen.size(), 8u);  // disjoint, two of the ten left out
  DistributedSampler small(3, SamplerOptions{.num_replicas = 4, .rank = 0, .drop_last = true});
  EXPECT_EQ(small.num_samples(), 0u);
  EXPECT_TRUE(small.indices().empty());
}

TEST(DistributedSampler, EpochReshufflesDeterministically) {
  auto e0 = shards(100, 3, true, false, 0);
  auto e0_again = shards(100, 3, true, false, 0);
  auto e1 = shards(100, 3, true, false, 1);
  EXPECT_EQ(e0, e0_again);
  EXPECT_NE(e0, e1);
  std::set<size_t> seen;
  for (auto& s : e1) seen.insert(s.begin(), s.end());
  EXPECT_EQ(seen.size(), 100u);
  // Shuffled really means not the identity order.
  EXPECT_NE(e0[0], shards(100, 3, false, false, 0)[0]);
}

TEST(DistributedSampler, PermutationIsAPermutation) {
  auto p = seeded_permutation(1000, 7);
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(p, seeded_permutation(1000, 7));
  EXPECT_NE(p, seeded_permutation(1000, 8));
  EXPECT_TRUE(seeded_permutation(0, 1).empty());
}

TEST(DistributedSampler, BadRankIsRejected) {
  EXPECT_THROW(DistributedSampler(10, SamplerOptions{.num_replicas = 2, .rank = 2}), Error);
  EXPECT_THROW(DistributedSampler(10, SamplerOptions{.num_replicas = 0, .rank = 0}), Error);
}

}  // namespace
}  // namespace braid::ddp
