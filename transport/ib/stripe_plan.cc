#include "transport/ib/stripe_plan.h"

#include <algorithm>

namespace braid::transport::ib {

StripePlan plan_stripes(uint64_t seq, uint64_t bytes, uint32_t nqps, uint64_t min_stripe, uint64_t max_piece) {
  StripePlan plan;
  const uint64_t wanted = bytes == 0 ? 1 : (bytes + min_stripe - 1) / min_stripe;
  plan.stripes = static_cast<uint32_t>(std::clamp<uint64_t>(wanted, 1, nqps));
  for (uint32_t k = 0; k < plan.stripes; ++k) {
    // bytes * k fits: a message is below 2^59 bytes and k below kMaxQps.
    const uint64_t lo = bytes * k / plan.stripes;
    const uint64_t hi = bytes * (k + 1) / plan.stripes;
    const uint32_t qp = static_cast<uint32_t>((seq + k) % nqps);
    uint64_t at = lo;
    do {
      const uint64_t n = std::min(max_piece, hi - at);
      plan.pieces.push_back(Piece{qp, at, n});
      at += n;
    } while (at < hi);
  }
  return plan;
}

}  // namespace braid::transport::ib
