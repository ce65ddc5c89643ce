// transport/ib/stripe_plan.h - how one message is cut into RDMA writes over a connection's QPs.
//
// Words: a stripe is the share of a message that one QP carries, a contiguous byte range; a
// piece is one work request, at most max_piece bytes (the port's largest message). A message is
// cut into stripes only when each would still be at least min_stripe bytes (smaller ones cost
// more in work requests than a second QP gains), so it has stripes = clamp(ceil(bytes /
// min_stripe), 1, nqps); a zero-byte message is one stripe of one zero-byte piece. Stripe k
// covers [bytes*k/stripes, bytes*(k+1)/stripes) and goes on QP (seq + k) % nqps, so successive
// small messages also spread over the QPs. The last piece of each stripe is the write with
// immediate: an RC QP places its writes in order, so when the receiver sees that immediate, the
// stripe's earlier pieces have landed too. The receiver counts `stripes` immediates (the
// immediate says how many) before the message is whole.
#pragma once

#include <cstdint>
#include <vector>

namespace braid::transport::ib {

struct Piece {
  uint32_t qp = 0;        // index among the connection's QPs
  uint64_t offset = 0;    // within the message
  uint64_t bytes = 0;
  bool with_imm = false;  // the stripe's last piece
};

struct StripePlan {
  uint32_t stripes = 1;
  std::vector<Piece> pieces;  // stripe by stripe, each in offset order
};

// nqps >= 1, min_stripe >= 1, max_piece >= 1.
StripePlan plan_stripes(uint64_t seq, uint64_t bytes, uint32_t nqps, uint64_t min_stripe, uint64_t max_piece);

}  // namespace braid::transport::ib
