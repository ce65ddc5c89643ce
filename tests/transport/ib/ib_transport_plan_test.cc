// How messages are cut into writes over a connection's QPs (transport/ib/stripe_plan.h).
#include <gtest/gtest.h>

#include <map>

#include "transport/ib/stripe_plan.h"

namespace braid::transport::ib {
namespace {

// Every plan covers the message exactly once, in order within each stripe, each stripe on its
// own QP, no piece above max_piece.
void check_plan(uint64_t seq, uint64_t bytes, uint32_t nqps, uint64_t min_stripe, uint64_t max_piece) {
  const StripePlan p = plan_stripes(seq, bytes, nqps, min_stripe, max_piece);
  SCOPED_TRACE(::testing::Message() << "bytes " << bytes << " nqps " << nqps << " seq " << seq);
  ASSERT_GE(p.stripes, 1u);
  ASSERT_LE(p.stripes, nqps);
  uint64_t at = 0;
  std::map<uint32_t, int> stripes_on_qp;
  uint32_t current_qp = ~0u;
  for (const Piece& piece : p.pieces) {
    EXPECT_EQ(piece.offset, at);
    EXPECT_LE(piece.bytes, max_piece);
    EXPECT_LT(piece.qp, nqps);
    if (piece.qp != current_qp) {
      ++stripes_on_qp[piece.qp];
      current_qp = piece.qp;
    }
    at += piece.bytes;
  }
  EXPECT_EQ(at, bytes);
  EXPECT_EQ(stripes_on_qp.size(), p.stripes);
  for (const auto& [qp, n] : stripes_on_qp) EXPECT_EQ(n, 1) << "QP " << qp;
  EXPECT_EQ(p.pieces.front().qp, seq % nqps);
}

TEST(IbStripePlan, CoversEveryMessageOnce) {
  for (uint32_t nqps : {1u, 2u, 3u, 4u, 16u}) {
    for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{65536}, uint64_t{65537},
                           uint64_t{1} << 20, (uint64_t{64} << 20) + 3}) {
      for (uint64_t seq : {0u, 1u, 7u}) check_plan(seq, bytes, nqps, 64 * 1024, 1 << 30);
    }
  }
}

TEST(IbStripePlan, SmallMessagesStayOnOneQpAndRotate) {
  for (uint64_t seq = 0; seq < 8; ++seq) {
    const StripePlan p = plan_stripes(seq, 1000, 4, 64 * 1024, 1 << 30);
    ASSERT_EQ(p.stripes, 1u);
    ASSERT_EQ(p.pieces.size(), 1u);
    EXPECT_EQ(p.pieces[0].qp, seq % 4);
  }
}

TEST(IbStripePlan, ZeroBytesIsOneEmptyWrite) {
  const StripePlan p = plan_stripes(3, 0, 4, 64 * 1024, 1 << 30);
  ASSERT_EQ(p.pieces.size(), 1u);
  EXPECT_EQ(p.pieces[0].bytes, 0u);
}

TEST(IbStripePlan, LargeMessagesUseEveryQp) {
  const StripePlan p = plan_stripes(0, 64 << 20, 4, 64 * 1024, 1 << 30);
  EXPECT_EQ(p.stripes, 4u);
  EXPECT_EQ(p.pieces.size(), 4u);
  EXPECT_EQ(p.pieces[1].offset, uint64_t{16} << 20);
}

// A port whose largest message is small cuts each stripe into several pieces (each its own
// write with immediate: the receiver counts pieces).
TEST(IbStripePlan, StripesLongerThanThePortsLargestMessageAreCut) {
  check_plan(5, (uint64_t{3} << 20) + 11, 2, 64 * 1024, 1 << 20);
  const StripePlan p = plan_stripes(5, (uint64_t{3} << 20) + 11, 2, 64 * 1024, 1 << 20);
  EXPECT_EQ(p.stripes, 2u);
  EXPECT_EQ(p.pieces.size(), 4u);
}

}  // namespace
}  // namespace braid::transport::ib
