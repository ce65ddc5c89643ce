// Schedules checked without any transport: offsets, then every algorithm for world sizes 1..8
// run symbolically (tests/collectives/schedule_simulator.h): each result byte holds every
// rank's contribution exactly once, every send meets a receive of its size in order, and
// nothing deadlocks with the algorithm's window or the smallest window (2).
#include <gtest/gtest.h>

#include <algorithm>

#include "collectives/algorithms.h"
#include "collectives/double_binary_tree.h"
#include "collectives/ring.h"
#include "collectives/ring_depth.h"
#include "collectives/schedule.h"
#include "tests/collectives/schedule_simulator.h"

namespace braid::collectives {
namespace {

using testing::Symbol;

TEST(Offsets, SplitCoversTheWholeOnElementBoundaries) {
  for (size_t elems : {0u, 1u, 5u, 7u, 64u, 1003u}) {
    for (size_t parts : {1u, 2u, 3u, 7u, 8u, 2000u}) {
      const Span whole{40, elems * 4};
      size_t next = whole.offset, largest = 0, smallest = ~size_t{0};
      for (size_t i = 0; i < parts; ++i) {
        Span s = split(whole, parts, i, 4);
        EXPECT_EQ(s.offset, next);
        EXPECT_EQ(s.bytes % 4, 0u);
        next += s.bytes;
        largest = std::max(largest, s.bytes);
        smallest = std::min(smallest, s.bytes);
      }
      EXPECT_EQ(next, whole.offset + whole.bytes);
      EXPECT_LE(largest - smallest, 4u) << "pieces differ by at most one element";
    }
  }
}

TEST(Offsets, BlocksFollowCounts) {
  std::vector<size_t> counts{3, 0, 5};
  EXPECT_EQ(block(counts, 0, 1, 2).offset, 6u);
  EXPECT_EQ(block(counts, 0, 2, 2).offset, 6u);
  EXPECT_EQ(block(counts, 0, 2, 2).bytes, 10u);
  EXPECT_EQ(block({}, 7, 3, 4).offset, 84u);
  EXPECT_EQ(total_bytes(counts, 0, 3, 2), 16u);
  EXPECT_EQ(segments_for(0, 10), 0u);
  EXPECT_EQ(segments_for(11, 10), 2u);
}

// What rank `r`'s recv byte `b` must hold at the end; nullopt-like {0,~0} = not checked.
Symbol expected(const std::vector<CollectiveArgs>& all, int r, size_t b, int n) {
  const CollectiveArgs& a = all[static_cast<size_t>(r)];
  const uint32_t full = (1u << n) - 1;
  const uint8_t avg = a.op == Op::avg && n > 1 ? 1 : 0;  // x 1/1 is not applied
  const size_t e = dtype_size(a.dtype);
  const auto pos = [](size_t x) { return static_cast<uint32_t>(x); };
  auto owner = [&](const std::vector<size_t>& counts, size_t count, size_t byte, size_t* within) {
    for (int q = 0; q < n; ++q) {
      Span s = block(counts, count, static_cast<size_t>(q), e);
      if (byte >= s.offset && byte < s.offset + s.bytes) {
        *within = byte - s.offset;
        return q;
      }
    }
    return -1;
  };
  size_t within = 0;
  switch (a.kind) {
    case Kind::all_reduce: return {full, pos(b), avg};
    case Kind::broadcast: return {1u << a.root, pos(b), 0};
    case Kind::reduce: return r == a.root ? Symbol{full, pos(b), avg} : Symbol{};
    case Kind::all_gather:
    case Kind::gather: {
      if (a.kind == Kind::gather && r != a.root) return Symbol{};
      int q = owner(a.counts, a.count, b, &within);
      return {1u << q, pos(within), 0};
    }
    case Kind::reduce_scatter:
      return {full, pos(block(a.counts, a.count, static_cast<size_t>(r), e).offset + b), avg};
    case Kind::scatter:
      return {1u << a.root, pos(block(a.counts, a.count, static_cast<size_t>(r), e).offset + b), 0};
    case Kind::all_to_all: {
      int q = owner(a.recv_counts, a.count, b, &within);
      const CollectiveArgs& from = all[static_cast<size_t>(q)];
      return {1u << q, pos(block(from.send_counts, from.count, static_cast<size_t>(r), e).offset + within), 0};
    }
    default: return Symbol{};
  }
}

bool rooted(Kind k) { return k == Kind::broadcast || k == Kind::reduce || k == Kind::gather || k == Kind::scatter; }

struct Case {
  Kind kind;
  bool uneven;  // counts / split sizes
};

// Runs one configuration and checks the results; returns false (after reporting) on failure.
bool check(const std::vector<CollectiveArgs>& all, Algo algo, size_t seg, size_t window, size_t ring_depth = 1,
           std::shared_ptr<const std::vector<int>> order = nullptr) {
  const int n = static_cast<int>(all.size());
  testing::SimResult res = testing::simulate(all, algo, seg, window, ring_depth, std::move(order));
  if (!res.ok) {
    ADD_FAILURE() << res.error;
    return false;
  }
  for (int r = 0; r < n; ++r) {
    const auto& got = res.recv[static_cast<size_t>(r)];
    for (size_t b = 0; b < got.size(); ++b) {
      Symbol want = expected(all, r, b, n);
      if (want.mask == 0) continue;
      if (!(got[b] == want)) {
        ADD_FAILURE() << "rank " << r << " recv byte " << b << ": mask " << got[b].mask << " pos " << got[b].pos
                      << " scaled " << int(got[b].scaled) << ", want mask " << want.mask << " pos " << want.pos
                      << " scaled " << int(want.scaled);
        return false;
      }
    }
  }
  return true;
}

std::vector<CollectiveArgs> make_args(Kind kind, int n, size_t count, int root, bool in_place, bool uneven, Op op) {
  static char send_dummy, recv_dummy;
  std::vector<CollectiveArgs> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    CollectiveArgs& a = all[static_cast<size_t>(r)];
    a.kind = kind;
    a.count = count;
    a.dtype = DType::f32;
    a.op = op;
    a.root = root;
    a.send = &send_dummy;
    a.recv = in_place ? static_cast<void*>(&send_dummy) : &recv_dummy;
    if (kind == Kind::broadcast) a.send = nullptr;
    if (uneven && kind == Kind::all_to_all) {
      for (int q = 0; q < n; ++q) {
        a.send_counts.push_back((count + static_cast<size_t>(r * 3 + q)) % 5);  // rank r -> q
        a.recv_counts.push_back((count + static_cast<size_t>(q * 3 + r)) % 5);  // q -> rank r
      }
    } else if (uneven) {
      for (int q = 0; q < n; ++q) a.counts.push_back(q % 3 == 1 ? 0 : count + static_cast<size_t>(q));
    }
  }
  return all;
}

TEST(Schedules, EveryAlgorithmAndWorldSizeReducesEachContributionOnce) {
  const std::vector<Case> cases = {
      {Kind::all_reduce, false}, {Kind::broadcast, false},  {Kind::reduce, false},     {Kind::all_gather, false},
      {Kind::all_gather, true},  {Kind::reduce_scatter, false}, {Kind::reduce_scatter, true}, {Kind::gather, false},
      {Kind::gather, true},      {Kind::scatter, false},    {Kind::scatter, true},     {Kind::all_to_all, false},
      {Kind::all_to_all, true},
  };
  int failures = 0;
  for (const Case& c : cases) {
    for (Algo algo : {Algo::ring, Algo::tree, Algo::rd, Algo::chain, Algo::pairwise, Algo::direct}) {
      if (!supports(c.kind, algo)) continue;
      for (int n = 1; n <= 8; ++n) {
        for (size_t count : {size_t{0}, size_t{1}, static_cast<size_t>(n - 1), size_t{37}, size_t{1003}}) {
          for (size_t seg : {size_t{16}, size_t{256}, size_t{1} << 20}) {
            if (count > 100 && seg < 256 && n > 4) continue;  // keeps the sweep quick
            for (size_t window : {size_t{0}, size_t{2}}) {
              for (int root : {0, n - 1, n / 2}) {
                if (!rooted(c.kind) && root != 0) continue;
                for (bool in_place : {false, true}) {
                  const bool may = c.kind == Kind::all_reduce || c.kind == Kind::reduce || c.kind == Kind::all_to_all;
                  if (in_place && (!may || c.uneven)) continue;  // in place split sizes: one buffer, two layouts
                  const Op op = (count % 2 == 1) ? Op::avg : Op::sum;
                  auto all = make_args(c.kind, n, count, root, in_place, c.uneven, op);
                  SCOPED_TRACE(std::string(to_string(c.kind)) + (c.uneven ? "v" : "") + " " + to_string(algo) +
                               " n=" + std::to_string(n) + " count=" + std::to_string(count) + " seg=" +
                               std::to_string(seg) + " window=" + std::to_string(window) + " root=" +
                               std::to_string(root) + (in_place ? " in place" : "") + " op=" + to_string(op));
                  if (!check(all, algo, seg, window) && ++failures > 5) return;
                }
              }
            }
          }
        }
      }
    }
  }
}

// In a ring order other than the ranks' (ranks grouped by host, ring_order.h), every
// collective still delivers each rank's result by rank: the ones that follow the order
// relabel their peers, the ones that do not ignore it.
TEST(Schedules, EveryCollectiveIsCorrectInAHostOrderedRing) {
  const std::vector<Case> cases = {
      {Kind::all_reduce, false}, {Kind::broadcast, false},  {Kind::reduce, false},     {Kind::all_gather, false},
      {Kind::all_gather, true},  {Kind::reduce_scatter, false}, {Kind::reduce_scatter, true}, {Kind::gather, false},
      {Kind::scatter, true},     {Kind::all_to_all, true},
  };
  int failures = 0;
  for (int n = 2; n <= 8; ++n) {
    // Round-robin over two hosts (0 2 4 .. | 1 3 ..), and the reverse of rank order.
    std::vector<int> by_host, reversed;
    for (int r = 0; r < n; r += 2) by_host.push_back(r);
    for (int r = 1; r < n; r += 2) by_host.push_back(r);
    for (int r = n - 1; r >= 0; --r) reversed.push_back(r);
    for (const auto& order : {by_host, reversed}) {
      auto shared = std::make_shared<const std::vector<int>>(order);
      for (const Case& c : cases) {
        for (Algo algo : {Algo::ring, Algo::tree, Algo::rd, Algo::chain, Algo::pairwise, Algo::direct}) {
          if (!supports(c.kind, algo)) continue;
          for (size_t count : {size_t{1}, size_t{37}}) {
            for (int root : {0, n - 1}) {
              if (!rooted(c.kind) && root != 0) continue;
              for (bool in_place : {false, true}) {
                if (in_place && (c.kind != Kind::all_reduce || c.uneven)) continue;
                const Op op = count == 1 ? Op::avg : Op::sum;
                auto all = make_args(c.kind, n, count, root, in_place, c.uneven, op);
                SCOPED_TRACE(std::string(to_string(c.kind)) + (c.uneven ? "v" : "") + " " + to_string(algo) +
                             " n=" + std::to_string(n) + " count=" + std::to_string(count) + " root=" +
                             std::to_string(root) + (in_place ? " in place" : "") + " order[0..1]=" +
                             std::to_string(order[0]) + "," + std::to_string(order[1]));
                if (!check(all, algo, 16, 0, 2, shared) && ++failures > 5) return;
              }
            }
          }
        }
      }
    }
  }
}

// Ring schedules with segment columns interleaved in groups (Plan::ring_depth): still every
// contribution once, and no deadlock even with the smallest window, up to the deepest ring.
TEST(Schedules, RingColumnsInterleavedInGroups) {
  int failures = 0;
  for (const Case& c : {Case{Kind::all_reduce, false}, Case{Kind::all_gather, false}, Case{Kind::all_gather, true},
                        Case{Kind::reduce_scatter, false}, Case{Kind::reduce_scatter, true}}) {
    for (int n = 2; n <= 6; ++n) {
      for (size_t depth : {size_t{2}, size_t{3}, size_t{8}, kMaxRingDepth}) {
        for (size_t count : {size_t{1}, size_t{37}, size_t{1003}}) {
          for (size_t window : {size_t{0}, size_t{2}, size_t{5}}) {
            for (bool in_place : {false, true}) {
              if (in_place && (c.kind != Kind::all_reduce || c.uneven)) continue;
              const Op op = count == 37 ? Op::avg : Op::sum;
              auto all = make_args(c.kind, n, count, 0, in_place, c.uneven, op);
              SCOPED_TRACE(std::string(to_string(c.kind)) + (c.uneven ? "v" : "") + " n=" + std::to_string(n) +
                           " depth=" + std::to_string(depth) + " count=" + std::to_string(count) + " window=" +
                           std::to_string(window) + (in_place ? " in place" : ""));
              if (!check(all, Algo::ring, 16, window, depth) && ++failures > 5) return;
            }
          }
        }
      }
    }
  }
}

// With depth d, a ring all_reduce starts by sending d segments of its own input before it
// waits for anything: the next rank's step k of a column then depends on a message sent d
// messages earlier, which is what keeps the link busy (ring.cc, add_columns).
TEST(Schedules, RingDepthOrdersSendsGroupByGroup) {
  static char send_dummy, recv_dummy;
  CollectiveArgs a;
  a.kind = Kind::all_reduce;
  a.count = 4 * 64;  // 4 ranks, 64 floats each share: 4 segments of 16 floats
  a.send = &send_dummy;
  a.recv = &recv_dummy;
  for (size_t depth : {size_t{1}, size_t{2}, size_t{4}}) {
    const Schedule s = ring_all_reduce(make_plan(a, 1, 4, 64, depth));
    ASSERT_EQ(s.steps.size(), 4u * 7u);  // 4 columns of 2n-1 steps
    size_t leading_sends = 0;
    while (leading_sends < s.steps.size() && s.steps[leading_sends].kind == StepKind::send) ++leading_sends;
    EXPECT_EQ(leading_sends, depth) << "depth " << depth;
    EXPECT_GE(s.window, 4u * 3u * depth) << "two groups of columns in flight";
  }
}

TEST(DoubleBinaryTree, TwoSpanningTreesWhereNoRankIsInnerInBoth) {
  for (int n = 1; n <= 64; ++n) {
    for (int tree = 0; tree < 2; ++tree) {
      int roots = 0;
      for (int r = 0; r < n; ++r) {
        const TreeLinks t = double_tree_links(tree, r, n);
        EXPECT_LE(t.children.size(), 2u);
        if (t.parent < 0) {
          ++roots;
          continue;
        }
        const TreeLinks up = double_tree_links(tree, t.parent, n);
        EXPECT_EQ(std::count(up.children.begin(), up.children.end(), r), 1) << "n=" << n << " tree " << tree << " rank " << r;
        // Walking up reaches the root in at most log2(n)+1 steps: no cycles.
        int x = r, hops = 0;
        while (x >= 0 && hops <= 8) x = double_tree_links(tree, x, n).parent, ++hops;
        EXPECT_LT(x, 0) << "n=" << n << " rank " << r << " does not reach the root";
      }
      EXPECT_EQ(roots, 1) << "n=" << n;
    }
    for (int r = 0; r < n; ++r) {
      const bool inner0 = !double_tree_links(0, r, n).children.empty();
      const bool inner1 = !double_tree_links(1, r, n).children.empty();
      EXPECT_FALSE(inner0 && inner1) << "n=" << n << " rank " << r << " is inner in both trees";
    }
  }
}

TEST(Schedules, BarrierAndPointToPoint) {
  for (int n = 1; n <= 8; ++n) {
    auto all = make_args(Kind::barrier, n, 0, 0, false, false, Op::sum);
    auto res = testing::simulate(all, Algo::automatic, 256, 2);
    EXPECT_TRUE(res.ok) << "n=" << n << ": " << res.error;
    size_t rounds = 0;
    for (int d = 1; d < n; d <<= 1) ++rounds;
    EXPECT_EQ(res.messages, rounds * static_cast<size_t>(n));
  }
  // Rank 0 sends 1003 floats to rank 1 in 16-byte segments; ranks 2.. do nothing.
  for (size_t window : {size_t{0}, size_t{2}}) {
    static char buf;
    std::vector<CollectiveArgs> all(3);
    all[0].kind = Kind::send;
    all[0].peer = 1;
    all[1].kind = Kind::recv;
    all[1].peer = 0;
    all[2].kind = Kind::barrier;
    all[2].count = 0;
    for (int r = 0; r < 2; ++r) {
      all[static_cast<size_t>(r)].count = 1003;
      all[static_cast<size_t>(r)].send = &buf;
      all[static_cast<size_t>(r)].recv = &buf + 1;
    }
    // A barrier on 3 ranks would talk to rank 2; make rank 2 idle instead.
    all[2].kind = Kind::send;
    all[2].count = 0;
    all[2].peer = 0;
    auto res = testing::simulate(all, Algo::automatic, 16, window);
    ASSERT_TRUE(res.ok) << res.error;
    ASSERT_EQ(res.recv[1].size(), 1003u * 4);
    for (size_t b = 0; b < res.recv[1].size(); ++b) ASSERT_EQ(res.recv[1][b], (Symbol{1u, static_cast<uint32_t>(b), 0}));
  }
}

// send/recv with the automatic segment size: the message in at most 8 segments (the window),
// none under 256 KiB; both ends cut alike; a set BRAID_CHUNK_BYTES wins.
TEST(Schedules, PointToPointCutsLargeMessagesIntoAtMostEightSegments) {
  auto steps = [](Kind kind, size_t bytes, size_t segment) {
    CollectiveArgs a;
    a.kind = kind;
    a.peer = kind == Kind::send ? 1 : 0;
    a.dtype = DType::u8;
    a.count = bytes;
    const Plan p = make_plan(a, kind == Kind::send ? 0 : 1, 2, segment);
    auto s = build_schedule(a, Algo::automatic, p);
    EXPECT_TRUE(s.is_ok());
    return s.is_ok() ? s.value().steps.size() : size_t{0};
  };
  const size_t kib = 1024, mib = kib * kib;
  for (Kind kind : {Kind::send, Kind::recv}) {
    EXPECT_EQ(steps(kind, 1 * mib, 0), 4u) << "256 KiB segments";
    EXPECT_EQ(steps(kind, 2 * mib, 0), 8u);
    EXPECT_EQ(steps(kind, 64 * mib, 0), 8u) << "8 MiB segments";
    EXPECT_EQ(steps(kind, 64 * mib + 1, 0), 8u);
    EXPECT_EQ(steps(kind, 64 * mib, 256 * kib), 256u) << "BRAID_CHUNK_BYTES set";
  }
  EXPECT_EQ(p2p_segment_bytes(64 * mib), 8 * mib);
  EXPECT_EQ(p2p_segment_bytes(1), kDefaultSegmentBytes);
}

}  // namespace
}  // namespace braid::collectives
