// wait_for_ranks: the wait for every rank's settings card and transport address after the join
// says, between slices, which ranks have not published theirs, and its timeout names them (a
// rank that joined and then died used to leave the others in a silent get for the whole
// rendezvous timeout). Played on a file store, rank 0 of 4.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "braid/error.h"
#include "runtime/store_join.h"

namespace braid {
namespace {

using namespace std::chrono_literals;

class WaitForRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/braid-wait-for-ranks-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    store_ = std::make_shared<FileStore>(dir_ + "/store");
    store_->set_timeout(2s);  // progress lines every 0.5 s
    ns_ = std::make_shared<PrefixStore>("braid/c1", store_);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::string dir_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Store> ns_;
};

TEST_F(WaitForRanks, SaysWhichRanksHaveNotPublishedAndNamesThemWhenItGivesUp) {
  ns_->set("addr/0", "mine");
  ns_->set("addr/2", "x");
  ::testing::internal::CaptureStderr();
  Status st = wait_for_ranks(*ns_, "addr", "transport address", 0, 4);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("rank 0 waiting for the transport address of ranks 1, 3 at " + store_->address() +
                     " - 2/4 published, giving up in "),
            std::string::npos)
      << log;
  EXPECT_EQ(st.code(), ErrorCode::timeout) << st.message();
  EXPECT_NE(st.message().find("transport address of ranks 1, 3"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(store_->address()), std::string::npos) << st.message();
}

TEST_F(WaitForRanks, ReturnsOnceEveryOtherRankHasPublished) {
  ns_->set("settings/0", "mine");
  ns_->set("settings/1", "x");
  std::thread late([&] {
    std::this_thread::sleep_for(700ms);  // after the first progress line
    ns_->set("settings/2", "x");
  });
  Status st = wait_for_ranks(*ns_, "settings", "settings card", 0, 3);
  late.join();
  EXPECT_TRUE(st.is_ok()) << st.message();
}

}  // namespace
}  // namespace braid
