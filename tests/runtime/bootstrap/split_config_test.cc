// split_config: the child a rank makes from every parent rank's card, the same on every rank.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "braid/store.h"
#include "runtime/bootstrap/split.h"
#include "tests/support/temp_dir.h"

namespace braid {
namespace {

// Four parent ranks on two hosts (7 and 9): cards (color, key, host).
const std::vector<int64_t> kCards = {0, 5, 7,   // rank 0
                                     0, 1, 7,   // rank 1
                                     1, 0, 9,   // rank 2
                                     0, 0, 9};  // rank 3

CommunicatorConfig parent(int rank, const std::shared_ptr<Store>& store) {
  CommunicatorConfig p;
  p.rank = rank;
  p.size = 4;
  p.comm_id = 42;
  p.store = store;
  p.store_rank = 0;
  return p;
}

TEST(SplitConfig, MembersAreOrderedByKeyAndCountedPerHost) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path() + "/store");
  // Color 0 holds ranks 3 (key 0), 1 (key 1) and 0 (key 5), in that order.
  const CommunicatorConfig child = split_config(parent(1, store), 1, 0, kCards);
  EXPECT_EQ(child.size, 3);
  EXPECT_EQ(child.rank, 1);
  EXPECT_EQ(child.local_rank, 1);  // rank 0 shares host 7 and comes first
  EXPECT_EQ(child.local_size, 2);  // ranks 0 and 1 on host 7
  EXPECT_EQ(child.store_rank, 2);  // parent rank 0 serves the store; it is the child's rank 2
  ASSERT_NE(child.store, nullptr);
}

TEST(SplitConfig, AMemberAloneOnItsHostIsItsOnlyLocalRank) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path() + "/store");
  // Rank 3 is color 0's only member on host 9 (rank 2 there took color 1).
  const CommunicatorConfig child = split_config(parent(3, store), 1, 0, kCards);
  EXPECT_EQ(child.rank, 0);
  EXPECT_EQ(child.local_rank, 0);
  EXPECT_EQ(child.local_size, 1);
}

TEST(SplitConfig, EveryMemberAgreesOnTheChildsId) {
  testing::TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path() + "/store");
  const uint64_t id = split_config(parent(0, store), 3, 0, kCards).comm_id;
  EXPECT_EQ(split_config(parent(1, store), 3, 0, kCards).comm_id, id);
  EXPECT_EQ(split_config(parent(3, store), 3, 0, kCards).comm_id, id);
  EXPECT_NE(split_config(parent(2, store), 3, 1, kCards).comm_id, id);  // another color
  EXPECT_NE(split_config(parent(0, store), 4, 0, kCards).comm_id, id);  // another split
}

}  // namespace
}  // namespace braid
