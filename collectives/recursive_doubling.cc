#include "collectives/recursive_doubling.h"

namespace braid::collectives {

// Recursive doubling with fold-in/fold-out for any world size.
//
// Words: p2 is the largest power of two <= n and rem = n - p2 the ranks too many. Fold-in:
// among ranks 0..2*rem-1, each even rank sends its input to the odd rank above it and sits
// out; the odd rank adds it. The p2 ranks left are renumbered 0..p2-1 (odd rank r < 2*rem is
// r/2, rank r >= 2*rem is r - rem). Round k = 0..log2(p2)-1: partner = id XOR 2^k; both send
// what they hold and add what they receive, so after round k each holds the sum over a group
// of 2^(k+1) ids, disjoint from its partner's group: after log2(p2) rounds everyone holds the
// sum of all n inputs, each counted once. avg scales it on the last round. Fold-out: each odd
// rank sends the result to the even rank that sat out.
//
// The accumulator is recv. Out of place, the first reduce takes the send buffer as its operand
// and sends read it until then, so no copy is made. A round's send and its reduce touch the
// same range: the executor lets the reduce land only after the send went out, and the next
// round's send reads what this round reduced; that is the whole ordering. Segments (nseg of the
// whole buffer) run one after another, each through every round.
Schedule rd_all_reduce(const Plan& p) {
  Schedule s;
  const int n = p.size, r = p.rank;
  const Span whole{0, p.count * p.elem_size};
  const double avg = p.average ? 1.0 / n : 1.0;
  if (n == 1) {
    if (!p.in_place) add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, whole), range(Buf::send, whole)));
    if (avg != 1.0) add(s, make_step(StepKind::scale, -1, -1, range(Buf::recv, whole), {}, avg));
    return s;
  }
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;
  const bool sits_out = r < 2 * rem && r % 2 == 0;
  const int id = r < 2 * rem ? r / 2 : r - rem;
  auto real = [&](int i) { return i < rem ? 2 * i + 1 : i + rem; };
  const size_t nseg = segments_for(whole.bytes, p.segment_bytes);
  for (size_t sg = 0; sg < nseg; ++sg) {
    const Span c = split(whole, nseg, sg, p.elem_size);
    if (sits_out) {
      add(s, make_step(StepKind::send, -1, r + 1, {}, input_range(p, c)));
      add(s, make_step(StepKind::recv, r + 1, -1, range(Buf::recv, c)));
      continue;
    }
    bool acc_ready = p.in_place;  // recv holds our running sum
    if (r < 2 * rem) {
      add(s, make_step(StepKind::recv_reduce, r - 1, -1, range(Buf::recv, c), operand_range(p, c)));
      acc_ready = true;
    }
    for (int mask = 1; mask < p2; mask <<= 1) {
      const int partner = real(id ^ mask);
      const bool last = mask * 2 == p2;
      add(s, make_step(StepKind::send, -1, partner, {}, acc_ready ? range(Buf::recv, c) : range(Buf::send, c)));
      add(s, make_step(StepKind::recv_reduce, partner, -1, range(Buf::recv, c),
                       acc_ready ? Range{} : range(Buf::send, c), last ? avg : 1.0));
      acc_ready = true;
    }
    if (r < 2 * rem) add(s, make_step(StepKind::send, -1, r - 1, {}, range(Buf::recv, c)));
  }
  s.window = 4;
  return s;
}

}  // namespace braid::collectives
