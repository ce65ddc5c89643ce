// The ring depth policy (collectives/ring_depth.h): a pure function of what every rank shares.
#include "collectives/ring_depth.h"

#include <gtest/gtest.h>

#include "collectives/algorithms.h"

namespace braid::collectives {
namespace {

TEST(RingDepth, AnExplicitDepthWinsEverywhere) {
  for (bool local : {false, true}) {
    const RingDepth d = choose_ring_depth(3, local, 0, 4);
    EXPECT_EQ(d.depth, 3u);
    EXPECT_EQ(d.why, "BRAID_RING_DEPTH");
  }
}

TEST(RingDepth, HostLocalLinksKeepOneSegmentPerHop) {
  for (size_t segment : {size_t{0}, size_t{4} << 10, size_t{1} << 20}) {
    EXPECT_EQ(choose_ring_depth(0, true, segment, 4).depth, 1u) << segment;
  }
}

// Over the network the bytes in flight per hop are what counts: the default segment gets as
// many as kNetworkHopBytes needs, a larger segment fewer, never below two (a ring at depth 1
// waits a whole segment per hop) nor above what operation headers and the variable allow.
TEST(RingDepth, NetworkLinksKeepAFixedNumberOfBytesPerHop) {
  const RingDepth def = choose_ring_depth(0, false, 0, 4);
  EXPECT_EQ(def.depth, kNetworkHopBytes / kDefaultSegmentBytes);
  EXPECT_NE(def.why.find("256 KiB"), std::string::npos) << def.why;
  EXPECT_EQ(choose_ring_depth(0, false, kDefaultSegmentBytes, 4).depth, def.depth);
  EXPECT_EQ(choose_ring_depth(0, false, kNetworkHopBytes / 2, 4).depth, 2u);
  EXPECT_EQ(choose_ring_depth(0, false, kNetworkHopBytes, 4).depth, 2u);
  EXPECT_EQ(choose_ring_depth(0, false, size_t{64} << 20, 4).depth, 2u);
  EXPECT_EQ(choose_ring_depth(0, false, size_t{4} << 10, 4).depth, kMaxRingDepth);
  // A segment that does not divide the target rounds up: never fewer bytes than the target.
  const size_t odd = (size_t{3} << 20) / 7;
  const size_t d = choose_ring_depth(0, false, odd, 4).depth;
  EXPECT_GE(d * odd, kNetworkHopBytes);
  EXPECT_LT((d - 1) * odd, kNetworkHopBytes);
}

// The window of a ring all_reduce holds 4(n-1) slots per depth: with many ranks the depth that
// 2 MiB per hop asks for would hold hundreds of MiB, so the depth comes down to what
// kRingSlotBudget affords, never below 2, and says why.
TEST(RingDepth, ManyRanksBoundTheLandingSlots) {
  EXPECT_EQ(choose_ring_depth(0, false, 0, 8).depth, kNetworkHopBytes / kDefaultSegmentBytes);  // 56 MiB
  const RingDepth sixteen = choose_ring_depth(0, false, 0, 16);
  EXPECT_EQ(sixteen.depth, 4u);
  EXPECT_LE(4 * 15 * sixteen.depth * kDefaultSegmentBytes, kRingSlotBudget);
  EXPECT_NE(sixteen.why.find("with 16 ranks"), std::string::npos) << sixteen.why;
  EXPECT_EQ(choose_ring_depth(0, false, 0, 1024).depth, 2u);
  EXPECT_EQ(choose_ring_depth(0, true, 0, 1024).depth, 1u);
  EXPECT_EQ(choose_ring_depth(5, false, 0, 1024).depth, 5u);  // asked for: granted
}

}  // namespace
}  // namespace braid::collectives
