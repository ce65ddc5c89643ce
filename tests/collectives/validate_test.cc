// Argument validation, algorithm names and the selection table: no transport needed.
#include <gtest/gtest.h>

#include <cstdint>

#include "collectives/algorithms.h"
#include "collectives/collective.h"
#include "collectives/selection.h"
#include "collectives/validate.h"

namespace braid::collectives {
namespace {

CollectiveArgs all_reduce_args(size_t count) {
  static float send[8], recv[8];
  CollectiveArgs a;
  a.kind = Kind::all_reduce;
  a.count = count;
  a.send = send;
  a.recv = recv;
  return a;
}

void expect_invalid(const CollectiveArgs& a, int rank, int size, const std::string& words) {
  Status s = validate_collective(a, rank, size);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument) << words;
  EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
}

// validate_collective's short test for the common shapes never lets through what the full
// checks refuse, and refusals read the same: a sweep over kinds, ranks, roots, peers, dtypes,
// ops, counts and buffers, good and bad.
TEST(Validate, TheShortTestAgreesWithTheFullChecks) {
  static float send[8], recv[8];
  const Kind kinds[] = {Kind::all_reduce, Kind::broadcast, Kind::reduce,  Kind::all_gather,
                        Kind::reduce_scatter, Kind::gather, Kind::scatter, Kind::all_to_all,
                        Kind::barrier, Kind::send, Kind::recv};
  const size_t counts[] = {0, 3, SIZE_MAX / 3};
  int accepted = 0, compared = 0;
  for (Kind kind : kinds) {
    for (int size : {0, 1, 4}) {
      for (int rank : {-1, 0, 1, 4}) {
        for (int other : {-1, 0, 2, 4}) {  // root and peer
          for (int dtype : {0, 2, kNumDTypes}) {
            for (int op : {0, 5, kNumOps}) {
              for (size_t count : counts) {
                for (int buffers = 0; buffers < 4; ++buffers) {
                  for (bool vectors : {false, true}) {
                    CollectiveArgs a;
                    a.kind = kind;
                    a.root = other;
                    a.peer = other;
                    a.dtype = static_cast<DType>(dtype);
                    a.op = static_cast<Op>(op);
                    a.count = count;
                    a.send = (buffers & 1) != 0 ? send : nullptr;
                    a.recv = (buffers & 2) != 0 ? recv : nullptr;
                    if (vectors) a.counts.assign(4, 1);
                    const Status quick = validate_collective(a, rank, size);
                    const Status full = validate_collective_in_full(a, rank, size);
                    ASSERT_EQ(quick.is_ok(), full.is_ok())
                        << to_string(kind) << " rank " << rank << " of " << size << " root/peer " << other << " dtype "
                        << dtype << " op " << op << " count " << count << " buffers " << buffers << ": "
                        << full.message();
                    EXPECT_EQ(quick.message(), full.message());
                    accepted += quick.is_ok();
                    ++compared;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(accepted, 1000) << "of " << compared << ": the sweep must reach good calls too";
}

TEST(Validate, AcceptsOrdinaryCallsAndCountZero) {
  EXPECT_TRUE(validate_collective(all_reduce_args(8), 0, 4).is_ok());
  CollectiveArgs zero = all_reduce_args(0);
  zero.send = zero.recv = nullptr;
  EXPECT_TRUE(validate_collective(zero, 3, 4).is_ok()) << "count 0 with null buffers is fine";
  CollectiveArgs reduce = all_reduce_args(8);
  reduce.kind = Kind::reduce;
  reduce.root = 1;
  reduce.recv = nullptr;  // only the root needs a recv buffer
  EXPECT_TRUE(validate_collective(reduce, 0, 4).is_ok());
  CollectiveArgs barrier;
  barrier.kind = Kind::barrier;
  EXPECT_TRUE(validate_collective(barrier, 0, 1).is_ok());
}

TEST(Validate, RejectsBadArgumentsWithClearMessages) {
  CollectiveArgs root = all_reduce_args(8);
  root.kind = Kind::broadcast;
  root.root = 4;
  expect_invalid(root, 0, 4, "broadcast on rank 0: root 4 is out of range for a world of 4 ranks");
  root.root = -1;
  expect_invalid(root, 0, 4, "root -1 is out of range");

  CollectiveArgs null_buf = all_reduce_args(8);
  null_buf.recv = nullptr;
  expect_invalid(null_buf, 1, 4, "all_reduce on rank 1: recv buffer is null but 8 elements");
  null_buf = all_reduce_args(8);
  null_buf.send = nullptr;
  expect_invalid(null_buf, 1, 4, "send buffer is null");

  CollectiveArgs bitwise = all_reduce_args(8);
  bitwise.op = Op::bxor;
  bitwise.dtype = DType::bf16;
  expect_invalid(bitwise, 0, 2, "op bxor is bitwise and dtype bf16 is floating point");
  bitwise.dtype = DType::i32;
  EXPECT_TRUE(validate_collective(bitwise, 0, 2).is_ok());

  CollectiveArgs gatherv = all_reduce_args(2);
  gatherv.kind = Kind::all_gather;
  gatherv.counts = {1, 2, 3};
  expect_invalid(gatherv, 0, 4, "counts has 3 entries; it needs one per rank (4)");

  CollectiveArgs a2a = all_reduce_args(1);
  a2a.kind = Kind::all_to_all;
  a2a.send_counts = {1, 1};
  expect_invalid(a2a, 0, 2, "must be given together");
  a2a.recv_counts = {1};
  expect_invalid(a2a, 0, 2, "recv_counts 1 entries");

  CollectiveArgs p2p = all_reduce_args(1);
  p2p.kind = Kind::send;
  p2p.peer = 2;
  expect_invalid(p2p, 2, 4, "peer 2 must be another rank");
  p2p.peer = 9;
  expect_invalid(p2p, 2, 4, "peer 9 must be another rank in 0..3");

  expect_invalid(all_reduce_args(1), 4, 4, "rank is out of range");
  CollectiveArgs huge = all_reduce_args(1);
  huge.kind = Kind::all_gather;
  huge.count = ~size_t{0} / 2;
  expect_invalid(huge, 0, 4, "overflows");
}

TEST(Algorithms, NamesRoundTripAndUnknownNamesFail) {
  for (Algo a : {Algo::automatic, Algo::ring, Algo::tree, Algo::rd, Algo::chain, Algo::pairwise, Algo::direct}) {
    auto parsed = parse_algo(to_string(a));
    ASSERT_TRUE(parsed.is_ok());
    EXPECT_EQ(parsed.value(), a);
  }
  auto bad = parse_algo("butterfly");
  EXPECT_EQ(bad.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(bad.status().message().find("'butterfly'"), std::string::npos);
  EXPECT_EQ(operation_name(Kind::broadcast, Algo::ring), "broadcast (chain)");
  EXPECT_EQ(supported_algorithms(Kind::all_reduce), "ring, tree, rd");
}

TEST(Selection, SmallAllReduceTakesFewRoundsLargeTakesTheRing) {
  CollectiveArgs a = all_reduce_args(1);
  for (int n : {2, 3, 5, 8}) {
    a.count = 16;  // 64 bytes: latency-bound
    const Algo small = select_algorithm(a, 0, n, Algo::automatic);
    EXPECT_TRUE(small == Algo::rd || small == Algo::tree) << n << ": " << to_string(small);
    a.count = size_t{64} << 20;  // 256 MiB: bandwidth-bound
    EXPECT_EQ(select_algorithm(a, 0, n, Algo::automatic), Algo::ring) << n;
  }
  a.kind = Kind::broadcast;
  a.count = 16;
  EXPECT_EQ(select_algorithm(a, 0, 8, Algo::automatic), Algo::tree);
  a.count = size_t{64} << 20;
  EXPECT_EQ(select_algorithm(a, 0, 8, Algo::automatic), Algo::chain);
  a.kind = Kind::all_to_all;
  EXPECT_EQ(select_algorithm(a, 0, 8, Algo::automatic), Algo::pairwise);
  // A forced algorithm is returned as is; run_collective checks it fits.
  EXPECT_EQ(select_algorithm(a, 0, 8, Algo::ring), Algo::ring);
  EXPECT_FALSE(supports(Kind::all_to_all, Algo::ring));
  EXPECT_TRUE(supports(Kind::barrier, Algo::ring)) << "barrier has one algorithm; BRAID_ALGO does not apply";
}

TEST(Selection, CostModelGrowsWithBytesAndRanks) {
  for (Algo algo : {Algo::ring, Algo::rd, Algo::tree}) {
    EXPECT_LT(estimate_seconds(Kind::all_reduce, algo, 1 << 10, 4), estimate_seconds(Kind::all_reduce, algo, 1 << 24, 4));
  }
  EXPECT_LT(estimate_seconds(Kind::all_reduce, Algo::ring, 1 << 20, 2), estimate_seconds(Kind::all_reduce, Algo::ring, 1 << 20, 8));
}

// What the device staging (runtime/device/device_staging.h) copies in and out, and what validation
// requires to be non-null: one table for both.
TEST(BufferExtents, EachKindReadsAndWritesWhatItsShapeSays) {
  double src[1];
  CollectiveArgs a;
  a.dtype = DType::f64;
  a.count = 10;
  a.root = 1;
  a.send = src;
  struct Case {
    Kind kind;
    int rank;
    size_t send, recv;
  };
  const Case cases[] = {
      {Kind::all_reduce, 0, 10, 10},  {Kind::broadcast, 1, 10, 10}, {Kind::broadcast, 0, 0, 10},
      {Kind::reduce, 0, 10, 0},       {Kind::reduce, 1, 10, 10},    {Kind::all_gather, 2, 10, 40},
      {Kind::reduce_scatter, 2, 40, 10}, {Kind::gather, 1, 10, 40}, {Kind::gather, 3, 10, 0},
      {Kind::scatter, 1, 40, 10},     {Kind::scatter, 0, 0, 10},    {Kind::all_to_all, 0, 40, 40},
      {Kind::barrier, 0, 0, 0},       {Kind::send, 0, 10, 0},       {Kind::recv, 0, 0, 10},
  };
  for (const Case& c : cases) {
    a.kind = c.kind;
    BufferExtents x = buffer_extents(a, c.rank, 4);
    EXPECT_EQ(x.send, c.send) << to_string(c.kind) << " rank " << c.rank;
    EXPECT_EQ(x.recv, c.recv) << to_string(c.kind) << " rank " << c.rank;
  }
  a.kind = Kind::broadcast;  // the root broadcasting from recv reads no send buffer
  a.send = nullptr;
  EXPECT_EQ(buffer_extents(a, 1, 4).send, 0u);
  a.kind = Kind::all_gather;  // gatherv: own count in, all counts out
  a.counts = {1, 2, 3, 4};
  EXPECT_EQ(buffer_extents(a, 2, 4).send, 3u);
  EXPECT_EQ(buffer_extents(a, 2, 4).recv, 10u);
  a.kind = Kind::reduce_scatter;
  EXPECT_EQ(buffer_extents(a, 3, 4).send, 10u);
  EXPECT_EQ(buffer_extents(a, 3, 4).recv, 4u);
  a.counts.clear();
  a.kind = Kind::all_to_all;
  a.send_counts = {1, 1, 1, 1};
  a.recv_counts = {2, 2, 2, 2};
  EXPECT_EQ(buffer_extents(a, 0, 4).send, 4u);
  EXPECT_EQ(buffer_extents(a, 0, 4).recv, 8u);
}

}  // namespace
}  // namespace braid::collectives
