#include "collectives/ring.h"

#include <algorithm>

namespace braid::collectives {

namespace {

double average_factor(const Plan& p) { return p.average ? 1.0 / p.size : 1.0; }

// A copy of the input to recv when the operation is out of place, for world size 1.
void copy_input(const Plan& p, Schedule& s, Span whole, double factor) {
  if (!p.in_place) add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, whole), range(Buf::send, whole)));
  if (factor != 1.0) add(s, make_step(StepKind::scale, -1, -1, range(Buf::recv, whole), {}, factor));
}

// Adds the steps of segment columns 0..nseg-1, each `hops` steps long (step(sg, k), k = 0..hops-1),
// in groups of `depth` columns: within a group, step k of every column before step k+1 of any.
//
// Why: every step of a ring sends to the same next rank, and sends to one peer go out in
// program order. Step k of column sg waits for the previous rank's step k-1 of that column; in
// column-major order (depth 1) that is the message the previous rank sent just before, so each
// hop waits for a whole segment to cross the link plus the queueing and wake-up in between,
// and the link idles meanwhile, so all_reduce falls short of the links' goodput
// (docs/code_figures.md, "Collectives"). With `depth` columns interleaved, the message a step
// waits for went out `depth` messages earlier, so the link keeps depth-1 segments queued behind
// the one in flight.
// On a host-local link (TCP loopback) the copy through the kernel is the link, and more in
// flight only moves the bytes out of cache: depth 1 there (the runtime decides, see Plan).
// Deadlock-free with a window of depth + 1 steps or more (Schedule::min_window): step k of a
// column waits only for step k-1 of that column on the previous rank, `depth` steps earlier in
// its program, and a send meets its receive `depth` steps later in the next rank's program.
// The window of a ring built with add_columns: `per_depth` is its window at depth 1 (two
// columns' steps); at depth d it holds two groups of d columns. Plus the smallest window that
// cannot deadlock.
void set_ring_window(Schedule& s, const Plan& p, size_t per_depth) {
  s.window = per_depth * p.ring_depth;
  s.min_window = p.ring_depth + 1;
}

template <class StepOf>
void add_columns(size_t nseg, size_t depth, int hops, StepOf step) {
  for (size_t g0 = 0; g0 < nseg; g0 += depth) {
    const size_t g1 = std::min(nseg, g0 + depth);
    for (int k = 0; k < hops; ++k) {
      for (size_t sg = g0; sg < g1; ++sg) step(sg, k);
    }
  }
}

}  // namespace

// Ring all_reduce = reduce-scatter, then all-gather, on the same ring.
//
// Words: the buffer (count elements) is cut into n chunks, chunk c = split(buffer, n, c): the
// share rank c ends up owning fully reduced. Each chunk is cut into nseg segments, the
// pipelining unit: nseg = segments_for(largest chunk, segment_bytes), and segment s of chunk c
// = split(chunk c, nseg, s), so every rank computes the same segment boundaries.
//
// Loop bounds, for one segment column s, at rank r (all arithmetic mod n):
//   reduce-scatter step k = 0..n-1 handles chunk c(k) = r-k-1.
//     k = 0:        send c(0) = r-1 (our own input) to r+1.
//     k = 1..n-2:   recv_reduce_send c(k): r-1 sent it at its step k-1, since
//                   (r-1)-(k-1)-1 = r-k-1; we add our input and pass it on.
//     k = n-1:      c(n-1) = r-n = r: the last contribution arrives; chunk r is complete. We
//                   scale it (avg) and send it on: the first all-gather hop.
//   all-gather step j = 1..n-1 handles chunk r-j, which r-1 completed or forwarded one step
//     earlier ((r-1)-(j-1) = r-j): recv_copy_send for j < n-1, plain recv for j = n-1.
// Per segment: 2(n-1) sends and 2(n-1) receives, each of one segment. Columns go in groups of
// p.ring_depth (add_columns) and the window holds two groups, so the next segments are on the
// wire while one is being reduced.
Schedule ring_all_reduce(const Plan& p) {
  Schedule s;
  const int n = p.size;
  const Span whole{0, p.count * p.elem_size};
  if (n == 1) {
    copy_input(p, s, whole, 1.0);
    return s;
  }
  const int r = p.rank;
  const int next = static_cast<int>(mod(r + 1, n)), prev = static_cast<int>(mod(r - 1, n));
  // A share of up to two segments travels whole: cut in two, it pays a second message's
  // overhead for only half a segment of overlap (docs/code_figures.md, "Collectives").
  const size_t share = split(whole, n, 0, p.elem_size).bytes;
  const size_t nseg = share <= 2 * p.segment_bytes ? std::min<size_t>(1, share) : segments_for(share, p.segment_bytes);
  auto seg = [&](long long chunk, size_t sg) {
    return split(split(whole, n, mod(chunk, n), p.elem_size), nseg, sg, p.elem_size);
  };
  // Per column: k = 0 sends our input, k = 1..n-1 reduce-scatter, k = n..2n-2 all-gather.
  add_columns(nseg, p.ring_depth, 2 * n - 1, [&](size_t sg, int k) {
    if (k == 0) {
      add(s, make_step(StepKind::send, -1, next, {}, input_range(p, seg(r - 1, sg))));
    } else if (k < n) {
      Span c = seg(r - k - 1, sg);
      double f = k == n - 1 ? average_factor(p) : 1.0;
      add(s, make_step(StepKind::recv_reduce_send, prev, next, range(Buf::recv, c), operand_range(p, c), f));
    } else {
      const int j = k - n + 1;
      Span c = seg(r - j, sg);
      add(s, make_step(j < n - 1 ? StepKind::recv_copy_send : StepKind::recv, prev, j < n - 1 ? next : -1,
                  range(Buf::recv, c)));
    }
  });
  set_ring_window(s, p, 4 * static_cast<size_t>(n - 1));
  return s;
}

// Ring all_gather: block b (block(counts, count, b)) belongs to rank b. At rank r, step j =
// 0..n-1 handles block r-j: j = 0 sends our own block from the send buffer (a local copy puts
// it into recv too); j = 1..n-2 receive block r-j from r-1 (which handled it at its step j-1:
// (r-1)-(j-1) = r-j) and forward it; j = n-1 only receives. Blocks may differ in size
// (all_gatherv), so segments are cut per block with one nseg from the largest block: a small
// block's extra segments are empty and skipped on both ends.
Schedule ring_all_gather(const Plan& p) {
  Schedule s;
  const int n = p.size, r = p.rank;
  const Span own = block(p.counts, p.count, rank_at(p, static_cast<size_t>(r)), p.elem_size);
  add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, own), range(Buf::send, Span{0, own.bytes})));
  if (n == 1) return s;
  const int next = static_cast<int>(mod(r + 1, n)), prev = static_cast<int>(mod(r - 1, n));
  size_t largest = 0;
  for (int b = 0; b < n; ++b) largest = std::max(largest, block(p.counts, p.count, b, p.elem_size).bytes);
  const size_t nseg = segments_for(largest, p.segment_bytes);
  add_columns(nseg, p.ring_depth, n, [&](size_t sg, int j) {
    if (j == 0) {
      add(s, make_step(StepKind::send, -1, next, {}, range(Buf::send, split(Span{0, own.bytes}, nseg, sg, p.elem_size))));
      return;
    }
    Span b = split(block(p.counts, p.count, rank_at(p, mod(r - j, n)), p.elem_size), nseg, sg, p.elem_size);
    add(s, make_step(j < n - 1 ? StepKind::recv_copy_send : StepKind::recv, prev, j < n - 1 ? next : -1,
                range(Buf::recv, b)));
  });
  set_ring_window(s, p, 2 * static_cast<size_t>(n));
  return s;
}

// Ring reduce_scatter: the reduce-scatter half of ring_all_reduce with blocks for chunks
// (block b is rank b's result; blocks may differ: reduce_scatterv). The send buffer is the
// caller's and read-only, so partial sums in transit live in scratch, laid out like the input;
// the last step reduces straight into recv. Step k handles block r-k-1 as in ring_all_reduce.
Schedule ring_reduce_scatter(const Plan& p) {
  Schedule s;
  const int n = p.size, r = p.rank;
  const Span own = block(p.counts, p.count, rank_at(p, static_cast<size_t>(r)), p.elem_size);
  if (n == 1) {
    add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, Span{0, own.bytes}), range(Buf::send, own)));
    return s;
  }
  const int next = static_cast<int>(mod(r + 1, n)), prev = static_cast<int>(mod(r - 1, n));
  size_t largest = 0;
  for (int b = 0; b < n; ++b) largest = std::max(largest, block(p.counts, p.count, b, p.elem_size).bytes);
  const size_t nseg = segments_for(largest, p.segment_bytes);
  s.scratch_bytes = total_bytes(p.counts, p.count, n, p.elem_size);
  auto seg = [&](long long b, size_t sg) {
    return split(block(p.counts, p.count, rank_at(p, mod(b, n)), p.elem_size), nseg, sg, p.elem_size);
  };
  add_columns(nseg, p.ring_depth, n, [&](size_t sg, int k) {
    if (k == 0) {
      add(s, make_step(StepKind::send, -1, next, {}, range(Buf::send, seg(r - 1, sg))));
    } else if (k < n - 1) {
      Span c = seg(r - k - 1, sg);
      add(s, make_step(StepKind::recv_reduce_send, prev, next, range(Buf::scratch, c), range(Buf::send, c)));
    } else {
      Span c = seg(r, sg);
      Span out{c.offset - own.offset, c.bytes};
      add(s, make_step(StepKind::recv_reduce, prev, -1, range(Buf::recv, out), range(Buf::send, c), average_factor(p)));
    }
  });
  set_ring_window(s, p, 2 * static_cast<size_t>(n));
  return s;
}

// Chain broadcast: vrank v = r - root; data flows vrank 0 -> 1 -> ... -> n-1, one segment per
// step: the root sends, the middle ranks recv_copy_send, the tail receives. With the window
// holding W segments, the chain fills in n-1 steps and then moves one segment per step on
// every link at once: time ~ (n - 1 + nseg) segment times.
Schedule chain_broadcast(const Plan& p) {
  Schedule s;
  const int n = p.size;
  if (n == 1) return s;
  const size_t v = mod(p.rank - p.root, n);
  const int next = static_cast<int>(mod(p.rank + 1, n)), prev = static_cast<int>(mod(p.rank - 1, n));
  const Span whole{0, p.count * p.elem_size};
  const size_t nseg = segments_for(whole.bytes, p.segment_bytes);
  for (size_t sg = 0; sg < nseg; ++sg) {
    Span c = split(whole, nseg, sg, p.elem_size);
    if (v == 0) {
      add(s, make_step(StepKind::send, -1, next, {}, range(Buf::recv, c)));
    } else if (v + 1 < static_cast<size_t>(n)) {
      add(s, make_step(StepKind::recv_copy_send, prev, next, range(Buf::recv, c)));
    } else {
      add(s, make_step(StepKind::recv, prev, -1, range(Buf::recv, c)));
    }
  }
  s.window = 8;
  return s;
}

// Chain reduce: the broadcast chain run backwards, ending at the root: vrank n-1 sends its
// input, each middle vrank adds its own and passes the partial sum (kept in scratch, as the
// caller's recv buffer only exists at the root) and the root reduces the last hop into recv.
Schedule chain_reduce(const Plan& p) {
  Schedule s;
  const int n = p.size;
  const Span whole{0, p.count * p.elem_size};
  if (n == 1) {
    copy_input(p, s, whole, average_factor(p));
    return s;
  }
  const size_t v = mod(p.rank - p.root, n);
  const int toward_root = static_cast<int>(mod(p.rank - 1, n)), from_tail = static_cast<int>(mod(p.rank + 1, n));
  const size_t nseg = segments_for(whole.bytes, p.segment_bytes);
  if (v != 0 && v + 1 < static_cast<size_t>(n)) s.scratch_bytes = whole.bytes;
  for (size_t sg = 0; sg < nseg; ++sg) {
    Span c = split(whole, nseg, sg, p.elem_size);
    if (v + 1 == static_cast<size_t>(n)) {
      add(s, make_step(StepKind::send, -1, toward_root, {}, input_range(p, c)));
    } else if (v != 0) {
      add(s, make_step(StepKind::recv_reduce_send, from_tail, toward_root, range(Buf::scratch, c), input_range(p, c)));
    } else {
      add(s, make_step(StepKind::recv_reduce, from_tail, -1, range(Buf::recv, c), operand_range(p, c), average_factor(p)));
    }
  }
  s.window = 8;
  return s;
}

}  // namespace braid::collectives
