// Every collective on the inproc transport (ranks as threads) against a reference result.
//
// Parameters: world size 1..8, count (0, 1, world-1, odd, not divisible by the world size,
// 2^20+3), dtype, op, root, in place or not, uneven counts (v-forms), forced algorithm and
// segment size. All combinations would take hours; a pairwise covering design (covering.h)
// runs each pair of parameter values at least once, the largest count only with f32/sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "collectives/algorithms.h"
#include "collectives/collective.h"
#include "collectives/ring_order.h"
#include "tests/collectives/covering.h"
#include "tests/collectives/inproc_cluster.h"
#include "tests/collectives/reference.h"

namespace braid::collectives {
namespace {

using testing::get;
using testing::input_value;
using testing::InprocCluster;
using testing::run_collective;
using testing::put;

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32, DType::i64};
constexpr Op kOps[] = {Op::sum, Op::prod, Op::min, Op::max, Op::avg, Op::band, Op::bor, Op::bxor};
constexpr size_t kLarge = (size_t{1} << 20) + 3;

InprocCluster& cluster(int n) { return InprocCluster::shared(n); }
void drop_cluster(int n) { InprocCluster::drop_shared(n); }

bool reduces(Kind k) { return k == Kind::all_reduce || k == Kind::reduce || k == Kind::reduce_scatter; }
bool rooted(Kind k) { return k == Kind::broadcast || k == Kind::reduce || k == Kind::gather || k == Kind::scatter; }
bool has_v(Kind k) {
  return k == Kind::all_gather || k == Kind::reduce_scatter || k == Kind::gather || k == Kind::scatter ||
         k == Kind::all_to_all;
}
bool blocked(Kind k) { return has_v(k); }

struct Params {
  Kind kind = Kind::all_reduce;
  int n = 1;
  size_t count = 0;
  DType dtype = DType::f32;
  Op op = Op::sum;
  int root = 0;
  bool in_place = false;
  bool uneven = false;
  Algo algo = Algo::automatic;
  size_t seg = 0;
  size_t ring_depth = 1;
  bool by_host = false;  // the ring ordered for ranks placed round-robin on two hosts

  std::string str() const {
    std::ostringstream o;
    o << to_string(kind) << (uneven ? "v" : "") << " n=" << n << " count=" << count << " " << to_string(dtype) << " "
      << to_string(op) << " root=" << root << (in_place ? " in-place" : "") << " algo=" << to_string(algo)
      << " seg=" << seg << " depth=" << ring_depth << (by_host ? " ring by host" : "");
    return o.str();
  }
};

// Per-rank buffers and what rank r's recv must hold at the end (nan: not checked).
struct RankData {
  std::vector<std::byte> send, recv;
  std::vector<double> want;
  CollectiveArgs args;
};

std::vector<size_t> block_counts(const Params& p) {
  std::vector<size_t> c;
  for (int q = 0; q < p.n; ++q) c.push_back(p.uneven ? (q % 3 == 1 ? 0 : p.count + static_cast<size_t>(q)) : p.count);
  return c;
}

size_t prefix(const std::vector<size_t>& c, int upto) {
  size_t s = 0;
  for (int q = 0; q < upto; ++q) s += c[static_cast<size_t>(q)];
  return s;
}

std::vector<RankData> prepare(const Params& p) {
  const size_t e = dtype_size(p.dtype);
  const Op vop = reduces(p.kind) ? p.op : Op::sum;
  auto val = [&](int r, size_t i) { return input_value(p.dtype, vop, r, i); };
  auto fill = [&](std::vector<std::byte>& b, size_t elems, int r, size_t first) {
    b.assign(elems * e, std::byte{0x5a});
    for (size_t i = 0; i < elems; ++i) put(p.dtype, b.data(), i, val(r, first + i));
  };
  auto reduced = [&](size_t i) {
    std::vector<double> v;
    for (int q = 0; q < p.n; ++q) v.push_back(val(q, i));  // small integers: exact in every dtype
    std::vector<std::byte> out(8);
    put(p.dtype, out.data(), 0, testing::reduce_reference(p.dtype, p.op, v));
    return get(p.dtype, out.data(), 0);
  };
  const std::vector<size_t> counts = block_counts(p);
  const size_t total = prefix(counts, p.n);
  std::vector<RankData> d(static_cast<size_t>(p.n));
  for (int r = 0; r < p.n; ++r) {
    RankData& x = d[static_cast<size_t>(r)];
    CollectiveArgs& a = x.args;
    a.kind = p.kind, a.count = p.count, a.dtype = p.dtype, a.op = p.op, a.root = p.root;
    if (p.uneven && p.kind != Kind::all_to_all) a.counts = counts;
    const size_t mine = counts[static_cast<size_t>(r)], off = prefix(counts, r);
    const bool root = r == p.root;
    switch (p.kind) {
      case Kind::all_reduce:
      case Kind::reduce:
        fill(x.send, p.count, r, 0);
        if (p.kind == Kind::all_reduce || root) {
          for (size_t i = 0; i < p.count; ++i) x.want.push_back(reduced(i));
        }
        if (p.in_place) {
          x.recv = x.send;
          a.send = a.recv = x.recv.data();
        } else {
          x.recv.assign(p.kind == Kind::reduce && !root ? 0 : p.count * e, std::byte{0x5a});
          a.send = x.send.data();
          a.recv = x.recv.empty() ? nullptr : x.recv.data();
        }
        break;
      case Kind::broadcast:
        x.recv.assign(p.count * e, std::byte{0x5a});
        for (size_t i = 0; i < p.count; ++i) x.want.push_back(val(p.root, i));
        if (root && p.in_place) fill(x.recv, p.count, r, 0);
        if (root && !p.in_place) fill(x.send, p.count, r, 0);
        a.recv = x.recv.data();
        a.send = root && !p.in_place ? x.send.data() : nullptr;
        break;
      case Kind::all_gather:
      case Kind::gather: {
        const bool gets = p.kind == Kind::all_gather || root;
        fill(x.send, mine, r, 0);
        x.recv.assign(gets ? total * e : 0, std::byte{0x5a});
        if (gets) {
          for (int q = 0; q < p.n; ++q) {
            for (size_t i = 0; i < counts[static_cast<size_t>(q)]; ++i) x.want.push_back(val(q, i));
          }
        }
        a.recv = gets ? x.recv.data() : nullptr;
        a.send = x.send.data();
        if (p.in_place && gets && mine != 0) {
          std::memcpy(x.recv.data() + off * e, x.send.data(), mine * e);
          a.send = x.recv.data() + off * e;
        }
        break;
      }
      case Kind::reduce_scatter:
      case Kind::scatter: {
        const bool gives = p.kind == Kind::reduce_scatter || root;
        if (gives) fill(x.send, total, r, 0);
        x.recv.assign(mine * e, std::byte{0x5a});
        for (size_t i = 0; i < mine; ++i) x.want.push_back(p.kind == Kind::scatter ? val(p.root, off + i) : reduced(off + i));
        a.send = gives ? x.send.data() : nullptr;
        a.recv = x.recv.data();
        if (p.in_place && gives) a.recv = x.send.data() + off * e;
        break;
      }
      case Kind::all_to_all: {
        // Rank i sends m(i, j) elements to rank j; element k of that block is val(i, sent before + k).
        auto m = [&](int i, int j) { return p.uneven ? (p.count + static_cast<size_t>(i * 3 + j)) % 5 : p.count; };
        size_t stot = 0, rtot = 0;
        for (int q = 0; q < p.n; ++q) {
          if (p.uneven) a.send_counts.push_back(m(r, q)), a.recv_counts.push_back(m(q, r));
          stot += m(r, q), rtot += m(q, r);
        }
        fill(x.send, stot, r, 0);
        x.recv.assign(rtot * e, std::byte{0x5a});
        for (int q = 0; q < p.n; ++q) {
          size_t before = 0;
          for (int j = 0; j < r; ++j) before += m(q, j);
          for (size_t k = 0; k < m(q, r); ++k) x.want.push_back(val(q, before + k));
        }
        if (p.in_place) x.recv = x.send;
        a.send = p.in_place ? x.recv.data() : x.send.data();
        a.recv = x.recv.data();
        break;
      }
      default:
        break;
    }
  }
  return d;
}

void run_case(const Params& p) {
  SCOPED_TRACE(p.str());
  InprocCluster& c = cluster(p.n);
  std::vector<RankData> d = prepare(p);
  const uint64_t op_id = c.next_op_id();
  RunOptions opt;
  opt.algo = p.algo;
  opt.chunk_bytes = p.seg;
  opt.ring_depth = p.ring_depth;
  if (p.by_host) {
    std::vector<std::string> hosts;
    for (int r = 0; r < p.n; ++r) hosts.push_back(r % 2 == 0 ? "A" : "B");
    opt.order = std::make_shared<const std::vector<int>>(ring_order(hosts));
  }
  opt.op_id = op_id;
  opt.deadline = Deadline::after_seconds(30);
  auto st = c.run([&](int r) {
    return run_collective(d[static_cast<size_t>(r)].args, r, p.n, c.links(r), opt);
  });
  bool failed = false;
  for (int r = 0; r < p.n; ++r) {
    EXPECT_TRUE(st[static_cast<size_t>(r)].is_ok()) << "rank " << r << ": " << st[static_cast<size_t>(r)].message();
    failed = failed || !st[static_cast<size_t>(r)].is_ok();
  }
  if (failed) {
    drop_cluster(p.n);  // its connections were closed by the failed run
    return;
  }
  for (int r = 0; r < p.n; ++r) {
    const RankData& x = d[static_cast<size_t>(r)];
    const std::byte* out = static_cast<const std::byte*>(x.args.recv);
    for (size_t i = 0; i < x.want.size(); ++i) {
      const double got = get(p.dtype, out, i);
      const double tol = testing::tolerance(p.dtype, p.op, x.want[i]);
      if (!(std::fabs(got - x.want[i]) <= tol)) {
        FAIL() << "rank " << r << " element " << i << " of " << x.want.size() << ": got " << got << ", want " << x.want[i];
      }
    }
  }
}

std::vector<Algo> algorithms_of(Kind k) {
  std::vector<Algo> out;
  for (Algo a : {Algo::ring, Algo::tree, Algo::rd, Algo::chain, Algo::pairwise, Algo::direct}) {
    if (supports(k, a)) out.push_back(a);
  }
  return out;
}

// One covering design per collective; parameter order: world, count class, dtype, op, root
// class, in place, uneven, algorithm, segment, ring depth.
void sweep(Kind kind) {
  const std::vector<Algo> algos = algorithms_of(kind);
  const std::vector<size_t> segs = {0, 64, 4096};
  const std::vector<size_t> domains = {8, 6, 8, reduces(kind) ? 8u : 1u, rooted(kind) ? 4u : 1u, 2,
                                       has_v(kind) ? 2u : 1u, algos.size() + 1, segs.size(), 3};
  auto valid = [&](const std::vector<size_t>& c) {
    const DType t = kDTypes[c[2]];
    const Op op = kOps[c[3]];
    if (is_bitwise(op) && is_floating(t)) return false;
    if (c[1] == 5 && (t != DType::f32 || op != Op::sum || segs[c[8]] == 64)) return false;
    if (kind == Kind::all_to_all && c[5] == 1 && c[6] == 1) return false;  // in place split sizes: not offered
    return true;
  };
  const auto cases = testing::covering_design(domains, valid);
  ::testing::Test::RecordProperty("cases", static_cast<int>(cases.size()));
  std::printf("%s: %zu cases cover every pair of parameter values\n", to_string(kind), cases.size());
  for (const auto& c : cases) {
    Params p;
    p.kind = kind;
    p.n = static_cast<int>(c[0]) + 1;
    const size_t counts[] = {0, 1, static_cast<size_t>(p.n - 1), 37, static_cast<size_t>(5 * p.n + 3), kLarge};
    p.count = counts[c[1]];
    if (blocked(kind) && c[1] == 5) p.count = kLarge / static_cast<size_t>(p.n);
    p.dtype = kDTypes[c[2]];
    p.op = kOps[c[3]];
    const int roots[] = {0, p.n - 1, p.n / 2, 1 % p.n};
    p.root = roots[c[4]];
    p.in_place = c[5] == 1;
    p.uneven = c[6] == 1;
    p.algo = c[7] == 0 ? Algo::automatic : algos[c[7] - 1];
    p.seg = segs[c[8]];
    p.ring_depth = c[9] + 1;
    run_case(p);
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) return;
  }
}

TEST(InprocCollectives, AllReduce) { sweep(Kind::all_reduce); }
TEST(InprocCollectives, Broadcast) { sweep(Kind::broadcast); }
TEST(InprocCollectives, Reduce) { sweep(Kind::reduce); }
TEST(InprocCollectives, AllGather) { sweep(Kind::all_gather); }
TEST(InprocCollectives, ReduceScatter) { sweep(Kind::reduce_scatter); }
TEST(InprocCollectives, Gather) { sweep(Kind::gather); }
TEST(InprocCollectives, Scatter) { sweep(Kind::scatter); }
TEST(InprocCollectives, AllToAll) { sweep(Kind::all_to_all); }

// Ranks placed round-robin on two hosts, the ring ordered by host (ring_order.h): every
// collective and algorithm moves real bytes through the executor to results indexed by rank.
TEST(InprocCollectives, EveryCollectiveInARingOrderedByHost) {
  for (Kind kind : {Kind::all_reduce, Kind::broadcast, Kind::reduce, Kind::all_gather, Kind::reduce_scatter,
                    Kind::gather, Kind::scatter, Kind::all_to_all}) {
    for (Algo algo : algorithms_of(kind)) {
      for (int n : {3, 4, 6}) {
        for (bool uneven : {false, true}) {
          if (uneven && !has_v(kind)) continue;
          Params p;
          p.kind = kind;
          p.n = n;
          p.count = 1003;
          p.dtype = DType::i32;
          p.op = Op::sum;
          p.root = n - 1;
          p.uneven = uneven;
          p.algo = algo;
          p.seg = 256;
          p.ring_depth = 2;
          p.by_host = true;
          run_case(p);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

// The covering design meets each root class; this meets every root of every world size,
// with each algorithm of each rooted collective.
TEST(InprocCollectives, EveryRootOfEveryWorldSize) {
  for (Kind kind : {Kind::broadcast, Kind::reduce, Kind::gather, Kind::scatter}) {
    for (Algo algo : algorithms_of(kind)) {
      for (int n = 1; n <= 8; ++n) {
        for (int root = 0; root < n; ++root) {
          Params p;
          p.kind = kind;
          p.n = n;
          p.count = 37;
          p.dtype = DType::i32;
          p.op = Op::max;
          p.root = root;
          p.algo = algo;
          p.seg = 64;
          run_case(p);
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

// A forced tree all_reduce on a large buffer: 2 x 1025 pipelined segments through the tree.
TEST(InprocCollectives, TreeAllReduceLarge) {
  Params p;
  p.kind = Kind::all_reduce;
  p.n = 5;
  p.count = kLarge;
  p.in_place = true;
  p.algo = Algo::tree;
  p.seg = 4096;
  run_case(p);
}

}  // namespace
}  // namespace braid::collectives
