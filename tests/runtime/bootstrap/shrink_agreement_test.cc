// agree_on_members (runtime/bootstrap/shrink.h): survivors as threads over one FileStore, each
// with its own ShrinkRound, as ranks of one job would be.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "braid/store.h"
#include "runtime/bootstrap/shrink.h"
#include "tests/support/temp_dir.h"

namespace braid {
namespace {

using std::chrono::milliseconds;

ShrinkRound round_of(int rank, int size, std::vector<int> excluded, std::vector<int> suspected, milliseconds window) {
  ShrinkRound r;
  r.rank = rank;
  r.size = size;
  r.excluded.assign(static_cast<size_t>(size), false);
  r.suspected.assign(static_cast<size_t>(size), false);
  for (int e : excluded) r.excluded[static_cast<size_t>(e)] = true;
  for (int s : suspected) r.suspected[static_cast<size_t>(s)] = true;
  r.window = window;
  return r;
}

// Runs agree_on_members for each of `ranks` on its own thread; a rank's result, by rank.
std::vector<std::optional<Result<ShrinkMembers>>> agree(Store& store, const std::vector<int>& ranks, int size,
                                                        std::vector<int> excluded, std::vector<int> suspected,
                                                        milliseconds window) {
  std::vector<std::optional<Result<ShrinkMembers>>> out(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r : ranks) {
    threads.emplace_back([&, r] {
      out[static_cast<size_t>(r)].emplace(agree_on_members(store, round_of(r, size, excluded, suspected, window)));
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(ShrinkAgreement, SuspectIsNotWaitedForAndEveryoneAdoptsOneList) {
  testing::TempDir dir;
  FileStore store(dir.path() + "/store", std::chrono::seconds(10));
  // Rank 2 is dead and named by the failure; the window is long: nobody may wait for it.
  const auto started = std::chrono::steady_clock::now();
  auto out = agree(store, {0, 1, 3}, 4, {}, {2}, std::chrono::seconds(60));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  for (int r : {0, 1, 3}) {
    const auto& res = out[static_cast<size_t>(r)];
    ASSERT_TRUE(res && res->is_ok()) << (res ? res->status().message() : "no result");
    EXPECT_EQ(res->value().members, (std::vector<int>{0, 1, 3}));
    EXPECT_EQ(res->value().hosts.size(), 3u);
  }
}

TEST(ShrinkAgreement, ExcludedRanksStayOutEvenWhenTheyPost) {
  testing::TempDir dir;
  FileStore store(dir.path() + "/store", std::chrono::seconds(10));
  auto out = agree(store, {0, 1, 2}, 3, {1}, {}, std::chrono::seconds(60));
  for (int r : {0, 2}) {
    const auto& res = out[static_cast<size_t>(r)];
    ASSERT_TRUE(res && res->is_ok()) << (res ? res->status().message() : "no result");
    EXPECT_EQ(res->value().members, (std::vector<int>{0, 2}));
  }
  // Rank 1 ran the agreement (a caller of shrink() returns before it; here it shows what it
  // would adopt): it is not in the list.
  ASSERT_TRUE(out[1].has_value());
  EXPECT_EQ(out[1]->status().code(), ErrorCode::aborted);
}

TEST(ShrinkAgreement, UnsuspectedSilentRankIsLeftOutWhenTheWindowEndsAndTurnedAwayLater) {
  testing::TempDir dir;
  FileStore store(dir.path() + "/store", std::chrono::seconds(10));
  // Rank 2 is silent but not suspected: the others wait out their window, then go on without it.
  const auto started = std::chrono::steady_clock::now();
  auto out = agree(store, {0, 1}, 3, {}, {}, milliseconds(300));
  EXPECT_GE(std::chrono::steady_clock::now() - started, milliseconds(300));
  for (int r : {0, 1}) {
    const auto& res = out[static_cast<size_t>(r)];
    ASSERT_TRUE(res && res->is_ok()) << (res ? res->status().message() : "no result");
    EXPECT_EQ(res->value().members, (std::vector<int>{0, 1}));
  }
  // It comes back (it was stopped): the list is made, and it is not in it.
  Result<ShrinkMembers> late = agree_on_members(store, round_of(2, 3, {}, {}, std::chrono::seconds(60)));
  ASSERT_FALSE(late.is_ok());
  EXPECT_EQ(late.status().code(), ErrorCode::aborted);
  EXPECT_NE(late.status().message().find("without this rank"), std::string::npos) << late.status().message();
}

TEST(ShrinkAgreement, AttemptsDoNotMix) {
  testing::TempDir dir;
  FileStore store(dir.path() + "/store", std::chrono::seconds(10));
  (void)agree(store, {0, 1}, 3, {}, {2}, std::chrono::seconds(60));  // attempt 1 without rank 2
  std::vector<std::thread> threads;
  std::vector<std::optional<Result<ShrinkMembers>>> out(3);
  for (int r : {0, 1, 2}) {  // attempt 2: all three come
    threads.emplace_back([&, r] {
      ShrinkRound round = round_of(r, 3, {}, {}, std::chrono::seconds(60));
      round.attempt = 2;
      out[static_cast<size_t>(r)].emplace(agree_on_members(store, round));
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 1, 2}) {
    ASSERT_TRUE(out[static_cast<size_t>(r)]->is_ok());
    EXPECT_EQ(out[static_cast<size_t>(r)]->value().members, (std::vector<int>{0, 1, 2}));
  }
}

}  // namespace
}  // namespace braid
