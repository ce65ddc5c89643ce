// The ring depth policy (collectives/ring_depth.h): a pure function of what every rank shares.
#include "collectives/ring_depth.h"

#include <gtest/gtest.h>

#include "collectives/algorithms.h"

namespace braid::collectives {
namespace {

TEST(RingDepth, AnExplicitDepthWinsEverywhere) {
  for (bool local : {false, true}) {
    const RingDepth d = choose_ring_depth(3, local, 0);
    EXPECT_EQ(d.depth, 3u);
    EXPECT_EQ(d.why, "BRAID_RING_DEPTH");
  }
}

TEST(RingDepth, HostLocalLinksKeepOneSegmentPerHop) {
  for (size_t segment : {size_t{0}, size_t{4} << 10, size_t{1} << 20}) {
    EXPECT_EQ(choose_ring_depth(0, true, segment).depth, 1u) << segment;
  }
}

// Over the network the bytes in flight per hop are what counts: the default segment gets as
// many as kNetworkHopBytes needs, a larger segment fewer, never below two (a ring at depth 1
// waits a whole segment per hop) nor above what operation headers and the variable allow.
TEST(RingDepth, NetworkLinksKeepAFixedNumberOfBytesPerHop) {
  const RingDepth def = choose_ring_depth(0, false, 0);
  EXPECT_EQ(def.depth, kNetworkHopBytes / kDefaultSegmentBytes);
  EXPECT_NE(def.why.find("256 KiB"), std::string::npos) << def.why;
  EXPECT_EQ(choose_ring_depth(0, false, kDefaultSegmentBytes).depth, def.depth);
  EXPECT_EQ(choose_ring_depth(0, false, kNetworkHopBytes / 2).depth, 2u);
  EXPECT_EQ(choose_ring_depth(0, false, kNetworkHopBytes).depth, 2u);
  EXPECT_EQ(choose_ring_depth(0, false, size_t{64} << 20).depth, 2u);
  EXPECT_EQ(choose_ring_depth(0, false, size_t{4} << 10).depth, kMaxRingDepth);
  // A segment that does not divide the target rounds up: never fewer bytes than the target.
  const size_t odd = (size_t{3} << 20) / 7;
  const size_t d = choose_ring_depth(0, false, odd).depth;
  EXPECT_GE(d * odd, kNetworkHopBytes);
  EXPECT_LT((d - 1) * odd, kNetworkHopBytes);
}

}  // namespace
}  // namespace braid::collectives
