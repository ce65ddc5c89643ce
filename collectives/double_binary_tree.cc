#include "collectives/double_binary_tree.h"

#include <algorithm>
#include <bit>

namespace braid::collectives {

// The trees.
//
// Words: ranks get 1-based labels x = 1..n laid out in order along a complete binary tree:
// x's level is its number of trailing zero bits, the root is the largest power of two <= n,
// a node of level h has children x - 2^(h-1) and x + 2^(h-1), and its parent is x - 2^h when
// bit h+1 of x is set (x is a right child), else x + 2^h. Labels of level 0 (odd x) are
// the leaves. When n is not 2^k - 1 some labels are missing: a right child beyond n is
// replaced by the highest label of its subtree that exists (x + 2^j, largest j < h with
// x + 2^j <= n), and a parent beyond n by its nearest ancestor that exists; both rules pick
// the same edges.
//
// Tree 0 labels rank r as x = r + 1, so even ranks are its leaves. Tree 1 is complementary:
// for even n the mirror image (x = n - r: odd ranks are leaves), for odd n a shift by one
// (x = (r + 1) mod n + 1), so every rank but one is inner in at most one tree.
namespace {

int level(int x) { return std::countr_zero(static_cast<unsigned>(x)); }

int root_label(int n) { return static_cast<int>(std::bit_floor(static_cast<unsigned>(n))); }

int parent_label(int x, int n) {
  if (x == root_label(n)) return 0;
  const int h = level(x);
  int p = ((x >> (h + 1)) & 1) != 0 ? x - (1 << h) : x + (1 << h);
  while (p > n) p = parent_label(p, n);
  return p;
}

std::vector<int> child_labels(int x, int n) {
  std::vector<int> out;
  const int h = level(x);
  if (h == 0) return out;
  out.push_back(x - (1 << (h - 1)));
  for (int j = h - 1; j >= 0; --j) {
    if (x + (1 << j) <= n) {
      out.push_back(x + (1 << j));
      break;
    }
  }
  return out;
}

int label_of(int tree, int rank, int n) {
  if (tree == 0) return rank + 1;
  return n % 2 == 0 ? n - rank : (rank + 1) % n + 1;
}

int rank_of(int tree, int x, int n) {
  if (tree == 0) return x - 1;
  return n % 2 == 0 ? n - x : static_cast<int>(mod(x - 2, n));
}

}  // namespace

TreeLinks double_tree_links(int tree, int rank, int size) {
  TreeLinks t;
  const int x = label_of(tree, rank, size);
  const int p = parent_label(x, size);
  t.parent = p == 0 ? -1 : rank_of(tree, p, size);
  for (int c : child_labels(x, size)) t.children.push_back(rank_of(tree, c, size));
  return t;
}

// The all_reduce: half h of the buffer (split(buffer, 2, h)) goes up tree h to its root and
// back down, cut into nseg segments (from the larger half). For each segment s, in program
// order: tree 0 up, tree 1 up, tree 0 down, tree 1 down. Up: recv_reduce from each child into
// recv (the first one taking the input as operand), then send to the parent; a leaf sends its
// input directly. The root scales (avg) with its last reduce, then down: receive from the
// parent into recv, send to each child. The down receive lands in the range the up send read:
// the executor holds it until that send is done.
Schedule dbt_all_reduce(const Plan& p) {
  Schedule s;
  const int n = p.size;
  const Span whole{0, p.count * p.elem_size};
  const double avg = p.average ? 1.0 / n : 1.0;
  if (n == 1) {
    if (!p.in_place) add(s, make_step(StepKind::copy, -1, -1, range(Buf::recv, whole), range(Buf::send, whole)));
    if (avg != 1.0) add(s, make_step(StepKind::scale, -1, -1, range(Buf::recv, whole), {}, avg));
    return s;
  }
  const TreeLinks trees[2] = {double_tree_links(0, p.rank, n), double_tree_links(1, p.rank, n)};
  const size_t nseg = segments_for(split(whole, 2, 0, p.elem_size).bytes, p.segment_bytes);
  size_t fan = 0;
  for (const TreeLinks& t : trees) fan += t.children.size() + 1;
  for (size_t sg = 0; sg < nseg; ++sg) {
    Span c[2];
    for (int h = 0; h < 2; ++h) c[h] = split(split(whole, 2, static_cast<size_t>(h), p.elem_size), nseg, sg, p.elem_size);
    for (int h = 0; h < 2; ++h) {
      const TreeLinks& t = trees[h];
      Range operand = operand_range(p, c[h]);
      for (size_t k = 0; k < t.children.size(); ++k) {
        const bool last = k + 1 == t.children.size();
        add(s, make_step(StepKind::recv_reduce, t.children[k], -1, range(Buf::recv, c[h]), operand,
                         t.parent < 0 && last ? avg : 1.0));
        operand = Range{};
      }
      if (t.parent >= 0) {
        const bool leaf = t.children.empty();
        add(s, make_step(StepKind::send, -1, t.parent, {}, leaf ? input_range(p, c[h]) : range(Buf::recv, c[h])));
      }
    }
    for (int h = 0; h < 2; ++h) {
      const TreeLinks& t = trees[h];
      if (t.parent >= 0) add(s, make_step(StepKind::recv, t.parent, -1, range(Buf::recv, c[h])));
      for (int child : t.children) add(s, make_step(StepKind::send, -1, child, {}, range(Buf::recv, c[h])));
    }
  }
  s.window = 4 * fan;
  return s;
}

}  // namespace braid::collectives
