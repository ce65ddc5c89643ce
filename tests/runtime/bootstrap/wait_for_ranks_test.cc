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
#include "runtime/bootstrap/store_join.h"

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

// A store whose server goes away as the wait times out (torch's rank 0 gives up and exits at
// its own timeout): every call after the wait's last slice fails.
class GoneAfterTheWait : public Store {
 public:
  explicit GoneAfterTheWait(std::shared_ptr<Store> inner)
      : inner_(std::move(inner)), last_slice_(std::chrono::steady_clock::now() + inner_->timeout() - 50ms) {}
  void set(const std::string& k, const std::string& v) override { gone_or(), inner_->set(k, v); }
  std::string get(const std::string& k) override { return gone_or(), inner_->get(k); }
  int64_t add(const std::string& k, int64_t d) override { return gone_or(), inner_->add(k, d); }
  std::string compare_set(const std::string& k, const std::string& e, const std::string& d) override {
    return gone_or(), inner_->compare_set(k, e, d);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    try {
      inner_->wait(keys, timeout);
    } catch (const Error&) {
      gone_ = std::chrono::steady_clock::now() >= last_slice_;
      throw;
    }
  }
  bool check(const std::vector<std::string>& keys) override { return gone_or(), inner_->check(keys); }
  bool delete_key(const std::string& k) override { return gone_or(), inner_->delete_key(k); }
  int64_t num_keys() override { return gone_or(), inner_->num_keys(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  void set_timeout(std::chrono::milliseconds t) override { inner_->set_timeout(t); }
  std::string address() const override { return inner_->address(); }

 private:
  void gone_or() const {
    if (gone_) throw Error(ErrorCode::peer_lost, "lost the connection to the store");
  }
  std::shared_ptr<Store> inner_;
  std::chrono::steady_clock::time_point last_slice_;
  bool gone_ = false;
};

TEST_F(WaitForRanks, AStoreGoneAtTheTimeoutIsSaidNotAnEmptyList) {
  store_->set_timeout(500ms);
  ns_->set("addr/0", "mine");
  GoneAfterTheWait gone(ns_);
  ::testing::internal::CaptureStderr();
  Status st = wait_for_ranks(gone, "addr", "transport address", 0, 3);
  (void)::testing::internal::GetCapturedStderr();
  EXPECT_EQ(st.code(), ErrorCode::timeout) << st.message();
  EXPECT_NE(st.message().find("the store stopped answering"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("ranks  "), std::string::npos) << st.message();
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
