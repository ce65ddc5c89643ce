// transport/ib/stripe_plan.h - how one message is cut into RDMA writes over a connection's QPs.
//
// Words: a stripe is the share of a message that one QP carries, a contiguous byte range; a
// piece is one work request, at most max_piece bytes (the port's largest message). A message is
// cut into stripes only when each would still be at least min_stripe bytes (smaller ones cost
// more in work requests than a second QP gains), so it has stripes = clamp(ceil(bytes /
// min_stripe), 1, nqps); a zero-byte message is one stripe of one zero-byte piece. Stripe k
// covers [bytes*k/stripes, bytes*(k+1)/stripes) and goes on QP (seq + k) % nqps, so successive
// small messages also spread over the QPs. Every piece is a write with immediate, and the
// immediate says how many pieces the message has: the receiver's completion of a write with
// immediate gives that write's length only, so it sums the pieces' lengths to learn the
// message's, and the message is whole when all have arrived. At most kImmAuxMax + 1 pieces fit
// that count: a message needing more (beyond 64 of the port's largest messages) is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid::transport::ib {

struct Piece {
  uint32_t qp = 0;        // index among the connection's QPs
  uint64_t offset = 0;    // within the message
  uint64_t bytes = 0;
};

struct StripePlan {
  uint32_t stripes = 1;
  std::vector<Piece> pieces;  // stripe by stripe, each in offset order
};

constexpr size_t kMaxPieces = 64;  // the immediate's piece count: 6 bits (ib_wire.h)

// nqps >= 1, min_stripe >= 1, max_piece >= 1. More than kMaxPieces pieces means the message is
// too large for one immediate's count; the caller refuses it.
StripePlan plan_stripes(uint64_t seq, uint64_t bytes, uint32_t nqps, uint64_t min_stripe, uint64_t max_piece);

}  // namespace braid::transport::ib
