// leave_store: what a destroyed communicator leaves in the store (nothing, once every rank has
// left), played rank by rank on a file store. The multi-process version is
// Comm.DestroyedCommunicatorsLeaveNoKeys.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/bootstrap/store_join.h"

namespace braid {
namespace {

class StoreLeave : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/braid-store-leave-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    store_ = std::make_shared<FileStore>(dir_ + "/store");
    ns_ = std::make_shared<PrefixStore>("braid/c1", store_);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // What joining and connecting leave for `size` ranks; `readers` of them read every card.
  void joined(int size, int readers) {
    for (int r = 0; r < size; ++r) {
      for (const char* k : {"rank/", "settings/", "addr/"}) ns_->set(k + std::to_string(r), "x");
    }
    for (const char* k : {"world_size", "comm_id", "ready"}) ns_->set(k, "x");
    ns_->add("joined", size);
    for (int r = 0; r < readers; ++r) ns_->add("read", 1);
  }

  std::string dir_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Store> ns_;
};

TEST_F(StoreLeave, EveryRankLeavesNothing) {
  joined(3, 3);
  EXPECT_EQ(leave_store(*ns_, 1, 3, false), 1);
  EXPECT_FALSE(ns_->check({"addr/1"})) << "a rank's own keys go as it leaves, once every rank read them";
  EXPECT_TRUE(ns_->check({"addr/0"}));
  EXPECT_EQ(leave_store(*ns_, 0, 3, false), 2);
  EXPECT_EQ(leave_store(*ns_, 2, 3, false), 3);
  EXPECT_EQ(store_->num_keys(), 0);
}

// A rank that failed before the others read its keys leaves them; the last rank takes them.
TEST_F(StoreLeave, KeysOfARankThatLeftEarlyGoWithTheLast) {
  joined(3, 1);
  EXPECT_EQ(leave_store(*ns_, 2, 3, false), 1);
  EXPECT_TRUE(ns_->check({"addr/2"})) << "the others may still need them";
  ns_->add("read", 2);
  EXPECT_EQ(leave_store(*ns_, 0, 3, false), 2);
  EXPECT_EQ(leave_store(*ns_, 1, 3, false), 3);
  EXPECT_EQ(store_->num_keys(), 0);
}

// The rank serving the store waits for the others and takes the store with it: nobody deletes
// `finished` under its poll.
TEST_F(StoreLeave, ALingeringRankStillSeesEveryoneLeave) {
  joined(2, 2);
  EXPECT_EQ(leave_store(*ns_, 0, 2, true), 1);
  EXPECT_FALSE(everyone_left(*ns_, 2));
  EXPECT_EQ(leave_store(*ns_, 1, 2, false), 2);
  EXPECT_TRUE(everyone_left(*ns_, 2));
  EXPECT_TRUE(ns_->check({"finished"}));
}

}  // namespace
}  // namespace braid
