// Error paths, and what the sweeps do not cover, on the inproc transport: barrier, send/recv,
// automatic selection, two operations driven at once through runner.h, a forced algorithm that
// does not fit, invalid arguments, a missing rank (timeout) and a dead peer. Every one ends with
// a Status, never a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "collectives/collective.h"
#include "collectives/runner.h"
#include "tests/collectives/inproc_cluster.h"

namespace braid::collectives {
namespace {

using testing::InprocCluster;
using testing::run_collective;

constexpr size_t kLarge = (size_t{1} << 20) + 3;
InprocCluster& cluster(int n) { return InprocCluster::shared(n); }

TEST(InprocCollectives, BarrierEveryWorldSize) {
  for (int n = 1; n <= 8; ++n) {
    InprocCluster& c = cluster(n);
    RunOptions opt;
    opt.op_id = c.next_op_id();
    opt.deadline = Deadline::after_seconds(30);
    CollectiveArgs a;
    a.kind = Kind::barrier;
    auto st = c.run([&](int r) { return run_collective(a, r, n, c.links(r), opt); });
    for (int r = 0; r < n; ++r) EXPECT_TRUE(st[static_cast<size_t>(r)].is_ok()) << st[static_cast<size_t>(r)].message();
  }
}

TEST(InprocCollectives, SendRecvPairs) {
  for (int n : {2, 5, 8}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1003}, kLarge}) {
      InprocCluster& c = cluster(n);
      RunOptions opt;
      opt.op_id = c.next_op_id();
      opt.chunk_bytes = 4096;
      opt.deadline = Deadline::after_seconds(30);
      std::vector<std::vector<int32_t>> buf(static_cast<size_t>(n), std::vector<int32_t>(count));
      for (int r = 0; r < n; r += 2) {
        for (size_t i = 0; i < count; ++i) buf[static_cast<size_t>(r)][i] = static_cast<int32_t>(i * 7 + static_cast<size_t>(r));
      }
      auto st = c.run([&](int r) {
        if (r % 2 == 0 && r + 1 >= n) return Status::ok();  // odd one out
        CollectiveArgs a;
        a.kind = r % 2 == 0 ? Kind::send : Kind::recv;
        a.peer = r % 2 == 0 ? r + 1 : r - 1;
        a.count = count;
        a.dtype = DType::i32;
        a.send = buf[static_cast<size_t>(r)].data();
        a.recv = buf[static_cast<size_t>(r)].data();
        return run_collective(a, r, n, c.links(r), opt);
      });
      for (int r = 0; r < n; ++r) ASSERT_TRUE(st[static_cast<size_t>(r)].is_ok()) << st[static_cast<size_t>(r)].message();
      for (int r = 1; r < n; r += 2) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(buf[static_cast<size_t>(r)][i], static_cast<int32_t>(i * 7 + static_cast<size_t>(r - 1)));
        }
      }
    }
  }
}

TEST(InprocCollectives, ForcedAlgorithmMustImplementTheCollective) {
  InprocCluster& c = cluster(2);
  std::vector<float> send(4), recv(4);
  CollectiveArgs a;
  a.kind = Kind::all_to_all;
  a.count = 2;
  a.send = send.data();
  a.recv = recv.data();
  RunOptions opt;
  opt.algo = Algo::ring;
  opt.op_id = c.next_op_id();
  opt.deadline = Deadline::after_seconds(5);
  Status s = run_collective(a, 0, 2, c.links(0), opt);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
  EXPECT_NE(s.message().find("algorithm ring (BRAID_ALGO) does not implement all_to_all; it has: pairwise"),
            std::string::npos) << s.message();
}

TEST(InprocCollectives, InvalidArgumentsFailBeforeAnythingIsSent) {
  InprocCluster& c = cluster(3);
  std::vector<float> buf(4);
  RunOptions opt;
  opt.op_id = c.next_op_id();
  opt.deadline = Deadline::after_seconds(5);
  auto st = c.run([&](int r) {
    CollectiveArgs a;
    a.kind = Kind::reduce;
    a.count = 4;
    a.root = 3;  // out of range on every rank: nobody sends, nobody waits
    a.send = a.recv = buf.data();
    return run_collective(a, r, 3, c.links(r), opt);
  });
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), ErrorCode::invalid_argument);
    EXPECT_NE(s.message().find("root 3 is out of range"), std::string::npos) << s.message();
  }
}

TEST(InprocCollectives, AutomaticChoiceIsReportedAndAgreedOn) {
  InprocCluster& c = cluster(4);
  std::vector<std::vector<float>> buf(4, std::vector<float>(3, 1.0f));
  std::vector<Algo> used(4, Algo::automatic);
  RunOptions opt;
  opt.op_id = c.next_op_id();
  opt.deadline = Deadline::after_seconds(30);
  auto st = c.run([&](int r) {
    CollectiveArgs a;
    a.count = 3;
    a.send = a.recv = buf[static_cast<size_t>(r)].data();
    return run_collective(a, r, 4, c.links(r), opt, &used[static_cast<size_t>(r)]);
  });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(st[static_cast<size_t>(r)].is_ok()) << st[static_cast<size_t>(r)].message();
    EXPECT_NE(used[static_cast<size_t>(r)], Algo::automatic);
    EXPECT_EQ(used[static_cast<size_t>(r)], used[0]);
    EXPECT_EQ(buf[static_cast<size_t>(r)][2], 4.0f);
  }
}

// The runtime's way: operations prepared up front (arguments checked before anything is sent),
// then driven by the caller's own poll loop, one after the other: on an in-order connection
// two operations cannot interleave (messages pair by order, not by tag).
TEST(InprocCollectives, PreparedOperationsDrivenByTheCaller) {
  const int n = 4;
  InprocCluster& c = cluster(n);
  std::vector<std::vector<int32_t>> a(n, std::vector<int32_t>(1000)), b(n, std::vector<int32_t>(77));
  for (int r = 0; r < n; ++r) {
    std::fill(a[static_cast<size_t>(r)].begin(), a[static_cast<size_t>(r)].end(), r + 1);
    std::fill(b[static_cast<size_t>(r)].begin(), b[static_cast<size_t>(r)].end(), 10 * (r + 1));
  }
  RunOptions first, second;
  first.op_id = c.next_op_id();
  second.op_id = c.next_op_id();
  first.algo = Algo::ring;
  second.algo = Algo::tree;
  first.chunk_bytes = second.chunk_bytes = 256;
  auto st = c.run([&](int r) -> Status {
    CollectiveArgs x, y;
    x.count = 1000, y.count = 77;
    x.dtype = y.dtype = DType::i32;
    x.send = x.recv = a[static_cast<size_t>(r)].data();
    y.send = y.recv = b[static_cast<size_t>(r)].data();
    const auto caps = c.links(r).capabilities();
    ASSIGN_OR_RETURN(auto p1, prepare_collective(x, r, n, caps, c.peers(r), first));
    ASSIGN_OR_RETURN(auto p2, prepare_collective(y, r, n, caps, c.peers(r), second));
    const Deadline deadline = Deadline::after_seconds(30);
    std::vector<transport::Completion> done;
    for (Executor* e : {p1.executor.get(), p2.executor.get()}) {
      RETURN_IF_ERROR(e->progress());
      while (!e->done()) {
        if (deadline.expired()) return timeout_error("rank " + std::to_string(r) + " stuck");
        done.clear();
        RETURN_IF_ERROR(c.links(r).poll(done, std::chrono::milliseconds(100)));
        for (const auto& comp : done) {
          bool ours = false;
          RETURN_IF_ERROR(e->on_completion(comp, &ours));
          if (!ours) return internal_error("a completion of another operation");
        }
        RETURN_IF_ERROR(e->progress());
      }
    }
    return Status::ok();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(st[static_cast<size_t>(r)].is_ok()) << st[static_cast<size_t>(r)].message();
    EXPECT_EQ(a[static_cast<size_t>(r)][999], 10);
    EXPECT_EQ(b[static_cast<size_t>(r)][76], 100);
  }
}

// A ring all_reduce of 64 floats on a 3-rank cluster whose rank 2 never calls, each rank that
// does bounded by `deadline_s`: the status of each (rank 2's: ok).
std::vector<Status> all_reduce_without_rank_2(InprocCluster& c, double deadline_s) {
  std::vector<std::vector<float>> buf(3, std::vector<float>(64, 1.0f));
  RunOptions opt;
  opt.algo = Algo::ring;
  opt.op_id = c.next_op_id();
  opt.deadline = Deadline::after_seconds(deadline_s);
  return c.run([&](int r) {
    if (r == 2) return Status::ok();
    CollectiveArgs a;
    a.count = 64;
    a.send = a.recv = buf[static_cast<size_t>(r)].data();
    return run_collective(a, r, 3, c.links(r), opt);
  });
}

// Rank 2 never calls: the others end with a timeout naming the op, themselves and whom they
// were waiting for, and do not hang. (Detection bound only: a deadline of 300 ms.)
TEST(InprocCollectives, AMissingRankIsATimeoutNamingWhoWasAwaited) {
  InprocCluster c(3);
  auto st = all_reduce_without_rank_2(c, 0.3);
  EXPECT_EQ(st[0].code(), ErrorCode::timeout) << st[0].message();
  EXPECT_EQ(st[0].message().rfind("all_reduce (ring) on rank 0: did not finish before its deadline", 0), 0u)
      << st[0].message();
  EXPECT_NE(st[0].message().find("rank 2 (inproc:2) to send"), std::string::npos) << st[0].message();
  EXPECT_FALSE(st[1].is_ok());
}

// Rank 2 is dead: the others fail (well before their deadline) naming the operation and themselves.
TEST(InprocCollectives, ADeadPeerFailsTheOperationWithItsName) {
  InprocCluster c(3);
  c.fabric().kill(2);
  auto st = all_reduce_without_rank_2(c, 30);
  for (int r = 0; r < 2; ++r) {
    const Status& s = st[static_cast<size_t>(r)];
    EXPECT_NE(s.code(), ErrorCode::ok);
    EXPECT_NE(s.code(), ErrorCode::timeout) << s.message();
    EXPECT_EQ(s.message().rfind("all_reduce (ring) on rank " + std::to_string(r) + ": ", 0), 0u) << s.message();
  }
  EXPECT_EQ(st[0].code(), ErrorCode::peer_lost) << st[0].message();
}

}  // namespace
}  // namespace braid::collectives
