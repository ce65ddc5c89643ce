#include "collectives/exchange.h"

namespace braid::collectives {

// Pairwise all_to_all.
//
// Words: send block q (block(send_counts, count, q)) goes to rank q; recv block q comes from
// rank q. Step k = 1..n-1: send to r+k, receive from r-k. Every rank sends to a distinct peer
// in each step and that peer expects us in the same step ((r+k)-k = r), so with a window of
// two steps nobody waits on a peer that is busy elsewhere; a larger window lets all n-1
// exchanges overlap. Our own block is a local copy.
//
// In place (send == recv) the block we must send to r+k could already have been overwritten
// by a block received earlier, so the input is first copied whole into scratch and sent from
// there.
Schedule pairwise_all_to_all(const Plan& p) {
  Schedule s;
  const int n = p.size, r = p.rank;
  const size_t me = static_cast<size_t>(r);
  Buf from = Buf::send;
  if (p.in_place) {
    s.scratch_bytes = total_bytes(p.send_counts, p.count, static_cast<size_t>(n), p.elem_size);
    add(s, make_step(StepKind::copy, -1, -1, range(Buf::scratch, Span{0, s.scratch_bytes}),
                     range(Buf::recv, Span{0, s.scratch_bytes})));
    from = Buf::scratch;
  }
  for (int k = 1; k < n; ++k) {
    const size_t to = mod(r + k, n), src = mod(r - k, n);
    add(s, make_step(StepKind::send, -1, static_cast<int>(to), {}, range(from, block(p.send_counts, p.count, to, p.elem_size))));
    add(s, make_step(StepKind::recv, static_cast<int>(src), -1, range(Buf::recv, block(p.recv_counts, p.count, src, p.elem_size))));
  }
  add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, block(p.recv_counts, p.count, me, p.elem_size)),
                   range(from, block(p.send_counts, p.count, me, p.elem_size))));
  s.window = 2 * static_cast<size_t>(n);
  return s;
}

// Dissemination barrier: round k = 0.. while 2^k < n, send a token to r + 2^k and receive one
// from r - 2^k. After round k a rank has heard, directly or through others, from the 2^(k+1)
// ranks before it, so after ceil(log2 n) rounds from everyone. A token is one byte, so that
// the round is a real message on any transport. The round k+1 token is sent from the byte the
// round k token landed in: reading what round k wrote is what orders the rounds. The first
// token is written by no one: the executor zeroes the scratch.
Schedule dissemination_barrier(const Plan& p) {
  Schedule s;
  const int n = p.size, r = p.rank;
  size_t rounds = 0;
  for (long long d = 1; d < n; d <<= 1) ++rounds;
  s.scratch_bytes = rounds + 1;
  s.zero_scratch = true;
  size_t k = 0;
  for (long long d = 1; d < n; d <<= 1, ++k) {
    add(s, make_step(StepKind::send, -1, static_cast<int>(mod(r + d, n)), {}, Range{Buf::scratch, k, 1}));
    add(s, make_step(StepKind::recv, static_cast<int>(mod(r - d, n)), -1, Range{Buf::scratch, k + 1, 1}));
  }
  s.window = 2;
  return s;
}

// Point-to-point: cut into segments like everything else, so a large message streams through
// a bounded window; both ends compute the same cut from the same count.
Schedule p2p_send(const Plan& p) {
  Schedule s;
  const Span whole{0, p.count * p.elem_size};
  const size_t nseg = segments_for(whole.bytes, p.segment_bytes);
  for (size_t sg = 0; sg < nseg; ++sg) {
    add(s, make_step(StepKind::send, -1, p.peer, {}, range(Buf::send, split(whole, nseg, sg, p.elem_size))));
  }
  s.window = 8;
  return s;
}

Schedule p2p_recv(const Plan& p) {
  Schedule s;
  const Span whole{0, p.count * p.elem_size};
  const size_t nseg = segments_for(whole.bytes, p.segment_bytes);
  for (size_t sg = 0; sg < nseg; ++sg) {
    add(s, make_step(StepKind::recv, p.peer, -1, range(Buf::recv, split(whole, nseg, sg, p.elem_size))));
  }
  s.window = 8;
  return s;
}

}  // namespace braid::collectives
