// find_lossy_link (failure_board.h) on retransmission counts seen in the fault soak: a lossy
// rank's links retransmit most, any busy link a little.
#include <gtest/gtest.h>

#include <random>

#include "runtime/failure/failure_board.h"
#include "tests/runtime/faults/failure_board_fuzz.h"

namespace braid {
namespace {

std::vector<std::optional<Progress>> ranks(std::vector<std::vector<std::pair<int, uint64_t>>> counts) {
  std::vector<std::optional<Progress>> out;
  for (auto& c : counts) {
    Progress p;
    p.retransmits = std::move(c);
    out.push_back(p);
  }
  return out;
}

TEST(LossyLink, TheRankOnEveryBusyLink) {
  // Rank 0's link lost packets; a few retransmissions elsewhere are noise.
  auto r = find_lossy_link(ranks({{{1, 3}, {2, 2}}, {{0, 74}, {3, 1}}, {{0, 5}}, {{0, 97}, {1, 2}}}));
  EXPECT_EQ(r.rank, 0);
  // Few retransmissions in all (the loss had just begun), still only on rank 3's links.
  r = find_lossy_link(ranks({{}, {{3, 8}}, {{3, 5}}, {}}));
  EXPECT_EQ(r.rank, 3);
}

TEST(LossyLink, TheRankWhoseLinksCarryClearlyTheMost) {
  // Seen in the fault soak, rank 1 losing 30%: the link between healthy ranks 0 and 2 is busy
  // too (over a quarter of the busiest), so no rank is on every busy link; rank 1's links carry
  // 110 retransmissions, the next rank's 70.
  auto r = find_lossy_link(
      ranks({{{1, 52}}, {{0, 1}, {2, 1}, {3, 1}}, {{0, 17}, {1, 4}}, {{1, 51}}}));
  EXPECT_EQ(r.rank, 1);
}

TEST(LossyLink, OneBusyLinkNamesBothEnds) {
  auto r = find_lossy_link(ranks({{{1, 104}}, {}, {{1, 1}}, {}}));
  EXPECT_EQ(r.rank, -1);
  EXPECT_EQ(r.a, 0);
  EXPECT_EQ(r.b, 1);
}

TEST(LossyLink, NoiseAloneOrDisjointLinksNameNobody) {
  auto r = find_lossy_link(ranks({{{1, 1}}, {{2, 2}}, {}, {}}));
  EXPECT_EQ(r.rank, -1);
  EXPECT_EQ(r.a, -1);
  r = find_lossy_link(ranks({{{1, 40}}, {}, {{3, 40}}, {}}));  // two links with no rank in common
  EXPECT_EQ(r.rank, -1);
  EXPECT_EQ(r.a, -1);
  r = find_lossy_link({std::nullopt, std::nullopt});
  EXPECT_EQ(r.rank, -1);
}

// Board values as another rank (or anyone writing to the store) could leave them: random bytes,
// and well-formed values with one byte changed, never a crash or a rank outside the job.
TEST(FailureBoardFuzz, RandomAndMutatedValues) {
  std::mt19937 rng(20261125);
  const std::string good = std::string("3\n1\n2\nall_reduce #4 failed") + '\xff' + "4 3 1:40,2:7\nin all_reduce #4" +
                           '\xff' + "0 3 -\nidle" + '\xff' + "4 4 0:30\nx" + '\xff' + "4 4 -\ny" + '\xff' +
                           "2\nTimeout report";
  for (int i = 0; i < 3000; ++i) {
    std::string bytes;
    if (i % 2 == 0) {
      bytes.resize(rng() % 200);
      for (char& c : bytes) c = static_cast<char>(i % 4 == 0 ? rng() % 256 : "0123456789:,-\n \xff"[rng() % 16]);
    } else {
      bytes = good;
      for (int m = 0; m < 1 + i % 3; ++m) bytes[rng() % bytes.size()] = static_cast<char>(rng() % 256);
    }
    fuzz_failure_board(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
}

}  // namespace
}  // namespace braid
