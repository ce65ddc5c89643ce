#include "collectives/tree.h"

#include <algorithm>
#include <vector>

namespace braid::collectives {

// The binomial tree.
//
// Words: ranks are renumbered so the root is vrank 0: v = (rank - root) mod n. span(v) is the
// lowest set bit of v (for the root: the smallest power of two >= n). v's parent is v - span(v);
// its children are v + m for m = span/2, span/4, ..., 1 while v + m < n; its subtree is the
// vranks [v, min(v + span, n)). Every vrank's span halves on the way down, so the depth is
// ceil(log2 n): the number of message latencies a broadcast or reduce pays.
//
// Broadcast sends to the largest subtree first (it has the longest way to go); reduce receives
// from the smallest first (it finishes soonest). Both are pipelined in segments (nseg from the
// whole buffer, segment-major), so a forced tree on a large buffer still streams.
namespace {

struct Binomial {
  int n = 1;
  int root = 0;
  size_t v = 0;
  size_t span = 1;

  Binomial(const Plan& p) : n(p.size), root(p.root), v(mod(p.rank - p.root, p.size)) {
    if (v == 0) {
      while (span < static_cast<size_t>(n)) span <<= 1;
    } else {
      span = v & (~v + 1);
    }
  }
  int rank_of(size_t u) const { return static_cast<int>(mod(static_cast<long long>(u) + root, n)); }
  int parent() const { return rank_of(v - span); }
  size_t end() const { return std::min(v + span, static_cast<size_t>(n)); }
  // Child vranks, largest subtree first.
  std::vector<size_t> children() const {
    std::vector<size_t> out;
    for (size_t m = span >> 1; m >= 1; m >>= 1) {
      if (v + m < static_cast<size_t>(n)) out.push_back(v + m);
    }
    return out;
  }
};

// Blocks in vrank order: vcounts[u] = counts[rank_of(u)], so a subtree is one contiguous range.
struct VrankLayout {
  std::vector<size_t> vcounts;
  size_t count;
  size_t elem;
  size_t n;
  VrankLayout(const Plan& p, const Binomial& t) : count(p.count), elem(p.elem_size), n(static_cast<size_t>(p.size)) {
    if (!p.counts.empty()) {
      for (size_t u = 0; u < n; ++u) vcounts.push_back(p.counts[static_cast<size_t>(t.rank_of(u))]);
    }
  }
  size_t start(size_t u) const { return u < n ? block(vcounts, count, u, elem).offset : total_bytes(vcounts, count, n, elem); }
  Span vranks(size_t first, size_t last) const { return Span{start(first), start(last) - start(first)}; }
};

}  // namespace

Schedule binomial_broadcast(const Plan& p) {
  Schedule s;
  if (p.size == 1) return s;
  const Binomial t(p);
  const auto kids = t.children();
  const Span whole{0, p.count * p.elem_size};
  const size_t nseg = segments_for(whole.bytes, p.segment_bytes);
  for (size_t sg = 0; sg < nseg; ++sg) {
    Range c = range(Buf::recv, split(whole, nseg, sg, p.elem_size));
    if (t.v != 0) add(s, make_step(StepKind::recv, t.parent(), -1, c));
    for (size_t k : kids) add(s, make_step(StepKind::send, -1, t.rank_of(k), {}, c));
  }
  s.window = 4 * (kids.size() + 1);
  return s;
}

Schedule binomial_reduce(const Plan& p) {
  Schedule s;
  const Binomial t(p);
  auto kids = t.children();
  const Span whole{0, p.count * p.elem_size};
  const double avg = p.average ? 1.0 / p.size : 1.0;
  const bool root = t.v == 0;
  if (kids.empty()) {  // a leaf (or the only rank)
    if (root) {
      if (!p.in_place) add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, whole), range(Buf::send, whole)));
      if (avg != 1.0) add(s, make_step(StepKind::scale, -1, -1, range(Buf::recv, whole), {}, avg));
      return s;
    }
  }
  if (!root && !kids.empty()) s.scratch_bytes = whole.bytes;
  const Buf acc = root ? Buf::recv : Buf::scratch;
  const size_t nseg = segments_for(whole.bytes, p.segment_bytes);
  for (size_t sg = 0; sg < nseg; ++sg) {
    Span c = split(whole, nseg, sg, p.elem_size);
    // The first reduce adds our input; later ones add into what is already accumulated.
    Range operand = root ? operand_range(p, c) : input_range(p, c);
    for (size_t i = kids.size(); i-- > 0;) {
      const bool last = i == 0;
      add(s, make_step(StepKind::recv_reduce, t.rank_of(kids[i]), -1, range(acc, c), operand, root && last ? avg : 1.0));
      operand = Range{};
    }
    if (!root) add(s, make_step(StepKind::send, -1, t.parent(), {}, kids.empty() ? input_range(p, c) : range(acc, c)));
  }
  s.window = 4 * (kids.size() + 1);
  return s;
}

// Binomial gather: every vrank collects its subtree's blocks, in vrank order, into scratch and
// sends them to its parent as one message; a leaf sends its own block straight from the send
// buffer. The root ends with all blocks in vrank order and rotates them into recv with two
// copies: vranks [0, n-root) are ranks [root, n), vranks [n-root, n) are ranks [0, root).
// Not segmented: a tree is chosen for small messages, and each hop carries a whole subtree.
Schedule binomial_gather(const Plan& p) {
  Schedule s;
  const Binomial t(p);
  const VrankLayout lay(p, t);
  const auto kids = t.children();
  const size_t n = static_cast<size_t>(p.size);
  const Span own = lay.vranks(t.v, t.v + 1);
  if (kids.empty() && t.v != 0) {
    add(s, make_step(StepKind::send, -1, t.parent(), {}, range(Buf::send, Span{0, own.bytes})));
    return s;
  }
  s.scratch_bytes = lay.start(n);
  add(s, make_step(StepKind::copy, -1, -1, range(Buf::scratch, own), range(Buf::send, Span{0, own.bytes})));
  for (size_t i = kids.size(); i-- > 0;) {
    const size_t k = kids[i];
    const size_t k_end = std::min(k + (k & (~k + 1)), n);
    add(s, make_step(StepKind::recv, t.rank_of(k), -1, range(Buf::scratch, lay.vranks(k, k_end))));
  }
  if (t.v != 0) {
    add(s, make_step(StepKind::send, -1, t.parent(), {}, range(Buf::scratch, lay.vranks(t.v, t.end()))));
    return s;
  }
  const size_t tail = n - static_cast<size_t>(p.root);  // vranks [0, tail) are ranks [root, n)
  const Span first = lay.vranks(0, tail), second = lay.vranks(tail, n);
  add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, Span{second.bytes, first.bytes}), range(Buf::scratch, first)));
  add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, Span{0, second.bytes}), range(Buf::scratch, second)));
  s.window = 2 * (kids.size() + 2);
  return s;
}

// Binomial scatter: gather run backwards. The root rotates the send buffer into vrank order in
// scratch, every inner vrank receives its subtree's blocks from its parent and sends each
// child its subtree (largest first), and keeps its own block; a leaf receives straight into recv.
Schedule binomial_scatter(const Plan& p) {
  Schedule s;
  const Binomial t(p);
  const VrankLayout lay(p, t);
  const auto kids = t.children();
  const size_t n = static_cast<size_t>(p.size);
  const Span own = lay.vranks(t.v, t.v + 1);
  if (kids.empty() && t.v != 0) {
    add(s, make_step(StepKind::recv, t.parent(), -1, range(Buf::recv, Span{0, own.bytes})));
    return s;
  }
  s.scratch_bytes = lay.start(n);
  if (t.v == 0) {
    const size_t tail = n - static_cast<size_t>(p.root);
    const Span first = lay.vranks(0, tail), second = lay.vranks(tail, n);
    add(s, make_step(StepKind::copy, -1, -1, range(Buf::scratch, first), range(Buf::send, Span{second.bytes, first.bytes})));
    add(s, make_step(StepKind::copy, -1, -1, range(Buf::scratch, second), range(Buf::send, Span{0, second.bytes})));
  } else {
    add(s, make_step(StepKind::recv, t.parent(), -1, range(Buf::scratch, lay.vranks(t.v, t.end()))));
  }
  for (size_t k : kids) {
    const size_t k_end = std::min(k + (k & (~k + 1)), n);
    add(s, make_step(StepKind::send, -1, t.rank_of(k), {}, range(Buf::scratch, lay.vranks(k, k_end))));
  }
  add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, Span{0, own.bytes}), range(Buf::scratch, own)));
  s.window = 2 * (kids.size() + 2);
  return s;
}

// Direct gather/scatter: the root exchanges one message with every other rank, straight
// between its own buffer and theirs; rank order from root+1 so ranks are served round-robin.
Schedule direct_gather(const Plan& p) {
  Schedule s;
  const size_t n = static_cast<size_t>(p.size);
  const Span own = block(p.counts, p.count, static_cast<size_t>(p.rank), p.elem_size);
  if (p.rank != p.root) {
    add(s, make_step(StepKind::send, -1, p.root, {}, range(Buf::send, Span{0, own.bytes})));
    return s;
  }
  add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, own), range(Buf::send, Span{0, own.bytes})));
  for (size_t i = 1; i < n; ++i) {
    const size_t q = mod(p.root + static_cast<long long>(i), p.size);
    add(s, make_step(StepKind::recv, static_cast<int>(q), -1, range(Buf::recv, block(p.counts, p.count, q, p.elem_size))));
  }
  s.window = 2 * n;
  return s;
}

Schedule direct_scatter(const Plan& p) {
  Schedule s;
  const size_t n = static_cast<size_t>(p.size);
  const Span own = block(p.counts, p.count, static_cast<size_t>(p.rank), p.elem_size);
  if (p.rank != p.root) {
    add(s, make_step(StepKind::recv, p.root, -1, range(Buf::recv, Span{0, own.bytes})));
    return s;
  }
  for (size_t i = 1; i < n; ++i) {
    const size_t q = mod(p.root + static_cast<long long>(i), p.size);
    add(s, make_step(StepKind::send, -1, static_cast<int>(q), {}, range(Buf::send, block(p.counts, p.count, q, p.elem_size))));
  }
  add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, Span{0, own.bytes}), range(Buf::send, own)));
  s.window = 2 * n;
  return s;
}

}  // namespace braid::collectives
