// find_lossy_link (failure_board.h) on retransmission counts seen in the fault soak: a lossy
// rank's links retransmit most, any busy link a little.
#include <gtest/gtest.h>

#include "runtime/failure_board.h"

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

}  // namespace
}  // namespace braid
