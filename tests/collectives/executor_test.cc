// The executor on a scripted connection: what it posts after each progress() call, how it
// maps completions back by cookie, and how its errors read.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>

#include "collectives/buffer_pool.h"
#include "collectives/exchange.h"
#include "collectives/executor.h"
#include "collectives/recursive_doubling.h"
#include "collectives/ring.h"

namespace braid::collectives {
namespace {

struct Posted {
  bool is_send;
  const void* data;
  size_t bytes;
  uint64_t cookie;
};

class ScriptedConnection final : public transport::Connection {
 public:
  explicit ScriptedConnection(int peer) : peer_(peer) {}
  Status post_send(const void* data, size_t bytes, uint64_t cookie) override {
    posted.push_back({true, data, bytes, cookie});
    return Status::ok();
  }
  Status post_recv(void* data, size_t capacity, uint64_t cookie) override {
    posted.push_back({false, data, capacity, cookie});
    return Status::ok();
  }
  void close() override {}
  int peer_rank() const override { return peer_; }
  const std::string& peer_address() const override { return address_; }
  std::string stall_hint() const override { return hint; }

  // Completes the oldest posted operation (ok, full size).
  transport::Completion complete_front(Status status = Status::ok(), size_t bytes = ~size_t{0}) {
    Posted p = posted.front();
    posted.pop_front();
    return transport::Completion{this, p.cookie, p.is_send, bytes == ~size_t{0} ? p.bytes : bytes, status};
  }
  std::deque<Posted> posted;
  std::string hint;  // what stall_hint() says

 private:
  int peer_;
  std::string address_ = "10.0.0.9:4000";
};

ExecutorOptions options(const char* name, int rank, uint64_t op_id, size_t window) {
  ExecutorOptions o;
  o.name = name;
  o.rank = rank;
  o.op_id = op_id;
  o.window = window;
  return o;
}

TEST(Executor, KeepsTheWindowFullAcrossProgressCalls) {
  Plan p;
  p.rank = 0, p.size = 2, p.peer = 1, p.count = 100, p.segment_bytes = 40;  // 10 segments
  std::vector<float> buf(100);
  ScriptedConnection conn(1);
  std::vector<transport::Connection*> peers{nullptr, &conn};
  auto ex = Executor::create(p2p_send(p), buf.data(), nullptr, peers, options("send", 0, 9, 4));
  ASSERT_TRUE(ex.is_ok()) << ex.status().message();
  ASSERT_TRUE((*ex)->progress().is_ok());
  EXPECT_EQ(conn.posted.size(), 4u) << "a window of 4 segments goes out at once";
  size_t completed = 0;
  while (!(*ex)->done()) {
    bool ours = false;
    ASSERT_TRUE((*ex)->on_completion(conn.complete_front(), &ours).is_ok());
    EXPECT_TRUE(ours);
    ++completed;
    ASSERT_TRUE((*ex)->progress().is_ok());
    // One progress() after a completion refills the window: nothing waits for a later call.
    EXPECT_EQ(conn.posted.size(), std::min<size_t>(4, 10 - completed));
  }
  EXPECT_EQ(completed, 10u);
  EXPECT_EQ((*ex)->outstanding(), 0u);
}

// Rank 0 of a 2-rank recursive-doubling all_reduce of 16 floats (each 1.0; in place or not),
// rank 1's end of the connection scripted.
struct RdOfTwo {
  explicit RdOfTwo(bool in_place)
      : out(16, in_place ? 1.0f : 0.0f),
        ex(Executor::create(rd_all_reduce(plan(in_place)), in_place ? out.data() : in.data(), out.data(), peers,
                            options("all_reduce (rd)", 0, 5, 0))) {}
  static Plan plan(bool in_place) {
    Plan p;
    p.rank = 0, p.size = 2, p.count = 16, p.segment_bytes = 64, p.in_place = in_place;
    return p;
  }
  std::vector<float> in = std::vector<float>(16, 1.0f), out;
  ScriptedConnection conn{1};
  std::vector<transport::Connection*> peers{nullptr, &conn};
  Result<std::unique_ptr<Executor>> ex;
};

// A small all_reduce of two ranks (recursive doubling: send, then receive and reduce), as the
// runtime drives it: progress() after every poll, most of which find nothing while the peer is
// late. One pass per completion takes every step as far as it goes, and a call with no
// completion since the last looks at no step at all.
TEST(Executor, ProgressWithNothingNewLooksAtNoStep) {
  for (bool in_place : {false, true}) {
    RdOfTwo run(in_place);
    auto& [in, out, conn, peers, ex] = run;
    ASSERT_TRUE(ex.is_ok()) << ex.status().message();
    auto idle_polls = [&] {
      const uint64_t before = (*ex)->visits();
      const size_t posted = conn.posted.size();
      for (int k = 0; k < 10; ++k) ASSERT_TRUE((*ex)->progress().is_ok());
      EXPECT_EQ((*ex)->visits(), before) << "in place " << in_place;
      EXPECT_EQ(conn.posted.size(), posted);
    };
    ASSERT_TRUE((*ex)->progress().is_ok());
    ASSERT_EQ(conn.posted.size(), 2u) << "the receive, then the send, from one call";
    EXPECT_FALSE(conn.posted[0].is_send);
    EXPECT_TRUE(conn.posted[1].is_send);
    EXPECT_EQ((*ex)->visits(), 2u) << "each step once";
    idle_polls();
    Posted recv = conn.posted.front();
    conn.posted.pop_front();
    ASSERT_TRUE((*ex)->on_completion(conn.complete_front()).is_ok());  // the send
    ASSERT_TRUE((*ex)->progress().is_ok());
    EXPECT_EQ((*ex)->visits(), 3u) << "the receive's step alone: the send's retired";
    idle_polls();
    std::fill_n(static_cast<float*>(const_cast<void*>(recv.data)), 16, 2.0f);
    conn.posted.push_back(recv);
    ASSERT_TRUE((*ex)->on_completion(conn.complete_front()).is_ok());
    ASSERT_TRUE((*ex)->progress().is_ok());
    EXPECT_EQ((*ex)->visits(), 4u);
    EXPECT_TRUE((*ex)->done());
    EXPECT_EQ(out[0], 3.0f);
    EXPECT_EQ(out[15], 3.0f);
  }
}

TEST(Executor, ReceivesTheNextSegmentWhileReducingThisOne) {
  // A chain reduce at the root: every step is a recv_reduce from rank 1.
  Plan p;
  p.rank = 0, p.size = 2, p.root = 0, p.count = 64, p.segment_bytes = 64;  // 4 segments of 16 floats
  std::vector<float> in(64, 1.0f), out(64, 0.0f);
  ScriptedConnection conn(1);
  std::vector<transport::Connection*> peers{nullptr, &conn};
  auto ex = Executor::create(chain_reduce(p), in.data(), out.data(), peers, options("reduce (chain)", 0, 3, 2));
  ASSERT_TRUE(ex.is_ok());
  ASSERT_TRUE((*ex)->progress().is_ok());
  ASSERT_EQ(conn.posted.size(), 2u);
  for (const Posted& x : conn.posted) EXPECT_FALSE(x.is_send);
  // Land segment 0: it is reduced, and segment 2's receive is posted behind segment 1's.
  std::fill_n(static_cast<float*>(const_cast<void*>(conn.posted.front().data)), 16, 2.0f);
  ASSERT_TRUE((*ex)->on_completion(conn.complete_front()).is_ok());
  ASSERT_TRUE((*ex)->progress().is_ok());
  EXPECT_EQ(conn.posted.size(), 2u);
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[15], 3.0f);
}

// The barrier's first token is a scratch byte nobody writes. Scratch comes from a pool: without
// zeroing, the byte sent was whatever an earlier operation left there (or never-written heap,
// which valgrind saw go out through send()).
TEST(Executor, ABarrierSendsZeroedTokensWhateverThePoolHeld) {
  for (int dirty = 0; dirty < 4; ++dirty) {  // leave dirty small buffers in the pool
    PooledBytes b = take_bytes(4);
    std::fill(b.get(), b.get() + 4, std::byte{0xab});
  }
  Plan p;
  p.rank = 0, p.size = 2;
  ScriptedConnection conn(1);
  std::vector<transport::Connection*> peers{nullptr, &conn};
  auto ex = Executor::create(dissemination_barrier(p), nullptr, nullptr, peers, options("barrier", 0, 3, 2));
  ASSERT_TRUE(ex.is_ok()) << ex.status().message();
  ASSERT_TRUE((*ex)->progress().is_ok());
  auto sent = std::find_if(conn.posted.begin(), conn.posted.end(), [](const Posted& x) { return x.is_send; });
  ASSERT_NE(sent, conn.posted.end());
  ASSERT_EQ(sent->bytes, 1u);
  EXPECT_EQ(*static_cast<const unsigned char*>(sent->data), 0);
}

TEST(Executor, IgnoresCompletionsOfOtherOperations) {
  Plan p;
  p.rank = 0, p.size = 2, p.peer = 1, p.count = 4;
  std::vector<float> buf(4);
  ScriptedConnection conn(1);
  std::vector<transport::Connection*> peers{nullptr, &conn};
  auto ex = Executor::create(p2p_send(p), buf.data(), nullptr, peers, options("send", 0, 5, 0));
  ASSERT_TRUE(ex.is_ok());
  ASSERT_TRUE((*ex)->progress().is_ok());
  transport::Completion stale{&conn, Executor::make_cookie(4, 0, true), true, 16, Status::ok()};
  bool ours = true;
  ASSERT_TRUE((*ex)->on_completion(stale, &ours).is_ok());
  EXPECT_FALSE(ours);
  EXPECT_FALSE((*ex)->done());
  ASSERT_TRUE((*ex)->on_completion(conn.complete_front(), &ours).is_ok());
  EXPECT_TRUE(ours);
  ASSERT_TRUE((*ex)->progress().is_ok());
  EXPECT_TRUE((*ex)->done());
}

TEST(Executor, ErrorsNameTheOperationRankAndPeer) {
  Plan p;
  p.rank = 2, p.size = 3, p.count = 30;
  std::vector<float> in(30), out(30);
  ScriptedConnection left(1), right(0);
  std::vector<transport::Connection*> peers{&right, &left, nullptr};
  auto ex = Executor::create(ring_all_reduce(p), in.data(), out.data(), peers, options("all_reduce (ring)", 2, 1, 0));
  ASSERT_TRUE(ex.is_ok());
  ASSERT_TRUE((*ex)->progress().is_ok());
  EXPECT_NE((*ex)->waiting_for().find("rank 1 (10.0.0.9:4000) to send"), std::string::npos) << (*ex)->waiting_for();
  // The first receive (from rank 1) arrives with the wrong size.
  while (left.posted.front().is_send) left.posted.pop_front();
  Status s = (*ex)->on_completion(left.complete_front(Status::ok(), 4));
  EXPECT_EQ(s.code(), ErrorCode::mismatch);
  EXPECT_EQ(s.message().rfind("all_reduce (ring) on rank 2: expected", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("from rank 1 (10.0.0.9:4000)"), std::string::npos) << s.message();

  auto ex2 = Executor::create(ring_all_reduce(p), in.data(), out.data(), peers, options("all_reduce (ring)", 2, 2, 0));
  ASSERT_TRUE(ex2.is_ok());
  left.posted.clear();
  ASSERT_TRUE((*ex2)->progress().is_ok());
  while (left.posted.front().is_send) left.posted.pop_front();
  Status lost = (*ex2)->on_completion(left.complete_front(peer_lost("rank 1 (10.0.0.9:4000) reset the connection")));
  EXPECT_EQ(lost.code(), ErrorCode::peer_lost);
  EXPECT_EQ(lost.message(), "all_reduce (ring) on rank 2: rank 1 (10.0.0.9:4000) reset the connection");
}

TEST(Executor, WhatItWaitsForCarriesTheConnectionsStallHint) {
  Plan p;
  p.rank = 0, p.size = 2, p.count = 8;
  std::vector<float> in(8), out(8);
  ScriptedConnection other(1);
  std::vector<transport::Connection*> peers{nullptr, &other};
  auto ex = Executor::create(ring_all_reduce(p), in.data(), out.data(), peers, options("all_reduce (ring)", 0, 3, 0));
  ASSERT_TRUE(ex.is_ok());
  ASSERT_TRUE((*ex)->progress().is_ok());
  EXPECT_EQ((*ex)->waiting_for().find("(it has"), std::string::npos) << (*ex)->waiting_for();
  other.hint = "it has not answered our connection handshake";
  EXPECT_NE((*ex)->waiting_for().find("rank 1 (10.0.0.9:4000) to send (it has not answered our connection handshake)"),
            std::string::npos)
      << (*ex)->waiting_for();
}

TEST(Executor, RefusesASchedulePeerWithoutConnection) {
  Plan p;
  p.rank = 0, p.size = 3, p.count = 30;
  std::vector<float> in(30), out(30);
  ScriptedConnection one(1);
  std::vector<transport::Connection*> peers{nullptr, &one, nullptr};
  auto ex = Executor::create(ring_all_reduce(p), in.data(), out.data(), peers, options("all_reduce (ring)", 0, 1, 0));
  ASSERT_FALSE(ex.is_ok());
  EXPECT_EQ(ex.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(ex.status().message().find("missing connection between rank 0 (this process) and rank 2"), std::string::npos)
      << ex.status().message();
}

// A header every framed test run sends and accepts (a peer's header that differs fails the check).
constexpr unsigned char kHeader[4] = {'h', 'd', 'r', '!'};
struct FixedHeader final : HeaderSource {
  const unsigned char* header_for(int) const override { return kHeader; }
  Status check(int, const unsigned char* data, size_t, const Status&) const override {
    return data != nullptr && std::equal(kHeader, kHeader + sizeof kHeader, data) ? Status::ok()
                                                                                   : protocol_error("bad header");
  }
};

// Completes `x`, a first receive with its header inline, as if `n` floats of `value` came.
transport::Completion arrive(ScriptedConnection& conn, const Posted& x, size_t n, float value) {
  auto* d = static_cast<unsigned char*>(const_cast<void*>(x.data));
  std::copy(kHeader, kHeader + sizeof kHeader, d);
  std::fill_n(reinterpret_cast<float*>(d + sizeof kHeader), n, value);
  return transport::Completion{&conn, x.cookie, false, sizeof kHeader + n * sizeof(float), Status::ok()};
}

// The runtime's small operations of two ranks (a send, a receive, recursive doubling's send
// then receive-and-reduce) run straight, without progress()'s sweeps, and keep the sweeps'
// rules: the receive is posted before the send, and data is reduced into a range only once the
// send that reads that range has completed (in place: the send reads the buffer the reduction
// writes).
TEST(Executor, ASendAndAReceiveRunStraightInTheSweepsOrder) {
  for (bool in_place : {false, true}) {
    for (bool recv_first : {false, true}) {  // which completion comes first
      SCOPED_TRACE(std::string(in_place ? "in place" : "out of place") + (recv_first ? ", receive first" : ""));
      RdOfTwo run(in_place);
      auto& [in, out, conn, peers, ex] = run;
      ASSERT_TRUE(ex.is_ok()) << ex.status().message();
      FixedHeader source;
      (*ex)->set_headers(sizeof kHeader, source, /*reverse=*/true);
      EXPECT_TRUE((*ex)->straight());
      ASSERT_TRUE((*ex)->progress().is_ok());
      ASSERT_EQ(conn.posted.size(), 2u);
      EXPECT_FALSE(conn.posted[0].is_send) << "the receive first";
      EXPECT_TRUE(conn.posted[1].is_send);
      EXPECT_TRUE((*ex)->all_posted());
      const Posted recv = conn.posted[0], send = conn.posted[1];
      conn.posted.clear();
      auto send_done = [&] {
        ASSERT_TRUE((*ex)->on_completion(transport::Completion{&conn, send.cookie, true, send.bytes, Status::ok()}).is_ok());
        ASSERT_TRUE((*ex)->progress().is_ok());
      };
      if (!recv_first) send_done();
      ASSERT_TRUE((*ex)->on_completion(arrive(conn, recv, 16, 2.0f)).is_ok());
      ASSERT_TRUE((*ex)->progress().is_ok());
      if (recv_first && in_place) {
        EXPECT_EQ(out[0], 1.0f) << "reduced into the buffer the send still reads";
        EXPECT_FALSE((*ex)->done());
        EXPECT_NE((*ex)->waiting_for().find("rank 1 (10.0.0.9:4000) to take our data"), std::string::npos)
            << (*ex)->waiting_for();
      }
      if (recv_first) send_done();
      EXPECT_TRUE((*ex)->done());
      EXPECT_EQ((*ex)->outstanding(), 0u);
      EXPECT_EQ(out[0], 3.0f);
      EXPECT_EQ(out[15], 3.0f);
      EXPECT_EQ((*ex)->visits(), 0u) << "no sweep";
    }
  }
}

// A receive that lands where the send before it reads waits for that send, on the straight path
// as in the sweeps; schedules of another shape take the sweeps.
TEST(Executor, AStraightReceiveIntoWhatTheSendReadsWaitsForTheSend) {
  Schedule s;
  s.steps.push_back(make_step(StepKind::send, -1, 1, {}, range(Buf::recv, Span{0, 64})));
  s.steps.push_back(make_step(StepKind::recv, 1, -1, range(Buf::recv, Span{0, 64})));
  std::vector<float> buf(16, 1.0f);
  ScriptedConnection conn(1);
  std::vector<transport::Connection*> peers{nullptr, &conn};
  auto ex = Executor::create(s, nullptr, buf.data(), peers, options("exchange", 0, 6, 0));
  ASSERT_TRUE(ex.is_ok()) << ex.status().message();
  FixedHeader source;
  (*ex)->set_headers(sizeof kHeader, source, /*reverse=*/true);
  EXPECT_TRUE((*ex)->straight());
  ASSERT_TRUE((*ex)->progress().is_ok());
  ASSERT_EQ(conn.posted.size(), 1u) << "the send alone";
  EXPECT_TRUE(conn.posted[0].is_send);
  EXPECT_FALSE((*ex)->all_posted());
  ASSERT_TRUE((*ex)->on_completion(conn.complete_front()).is_ok());
  ASSERT_TRUE((*ex)->progress().is_ok());
  ASSERT_EQ(conn.posted.size(), 1u) << "then the receive";
  EXPECT_FALSE(conn.posted[0].is_send);
  const Posted recv = conn.posted[0];
  conn.posted.clear();
  ASSERT_TRUE((*ex)->on_completion(arrive(conn, recv, 16, 7.0f)).is_ok());
  ASSERT_TRUE((*ex)->progress().is_ok());
  EXPECT_TRUE((*ex)->done());
  EXPECT_EQ(buf[0], 7.0f);
  EXPECT_EQ(buf[15], 7.0f);

  Plan p;
  p.rank = 0, p.size = 2, p.peer = 1, p.count = 100, p.segment_bytes = 40;  // 10 segments
  auto many = Executor::create(p2p_send(p), buf.data(), nullptr, peers, options("send", 0, 9, 4));
  ASSERT_TRUE(many.is_ok());
  (*many)->set_headers(sizeof kHeader, source, /*reverse=*/false);
  EXPECT_FALSE((*many)->straight());
  p.count = 16, p.segment_bytes = 64;  // one segment, but a root's send to a rank that only receives
  auto root = Executor::create(p2p_send(p), buf.data(), nullptr, peers, options("broadcast", 0, 9, 0));
  ASSERT_TRUE(root.is_ok());
  (*root)->set_headers(sizeof kHeader, source, /*reverse=*/true);
  EXPECT_FALSE((*root)->straight()) << "a header-only reply to post";
}

// A finished executor runs its schedule again on new buffers under a new op id (the runtime
// keeps runs of repeated operations): the second run reduces the new input into the new output,
// leaves the old buffers alone, carries the new op id in its cookies, and checks and sends
// headers again - inline with a small first message, as messages of their own with a large one.
// Before a run is done, it refuses.
class ExecutorRunsAgain : public ::testing::TestWithParam<size_t> {};

TEST_P(ExecutorRunsAgain, OnNewBuffersOnceDone) {
  const size_t n = GetParam();
  Plan p;
  p.rank = 0, p.size = 2, p.root = 0, p.count = n, p.segment_bytes = n * sizeof(float);  // one segment
  std::vector<float> in1(n, 1.0f), out1(n, 0.0f), in2(n, 5.0f), out2(n, 0.0f);
  ScriptedConnection conn(1);
  std::vector<transport::Connection*> peers{nullptr, &conn};
  auto ex = Executor::create(chain_reduce(p), in1.data(), out1.data(), peers, options("reduce (chain)", 0, 3, 2));
  ASSERT_TRUE(ex.is_ok());
  static constexpr unsigned char header[4] = {'h', 'd', 'r', '!'};
  struct Source final : HeaderSource {
    const unsigned char* header_for(int) const override { return header; }
    Status check(int, const unsigned char* data, size_t, const Status&) const override {
      ++checked;
      return data != nullptr && std::equal(header, header + sizeof header, data) ? Status::ok()
                                                                                 : protocol_error("bad header");
    }
    mutable int checked = 0;
  } source;
  int& checked = source.checked;
  (*ex)->set_headers(sizeof header, source, /*reverse=*/true);
  const bool inline_header = n * sizeof(float) <= Executor::kInlineHeaderMax;
  // One run: rank 1's message is `value` everywhere; the root only receives from rank 1, so it
  // also sends its header back (reverse).
  auto run = [&](uint64_t op_id, float value) {
    ASSERT_TRUE((*ex)->progress().is_ok());
    bool sent_header = false;
    while (!(*ex)->done()) {
      ASSERT_FALSE(conn.posted.empty());
      Posted x = conn.posted.front();
      EXPECT_EQ(x.cookie >> 32, op_id);
      size_t bytes = x.bytes;
      auto* d = static_cast<unsigned char*>(const_cast<void*>(x.data));
      if (x.is_send) {
        sent_header = std::equal(header, header + sizeof header, d);
      } else if (x.bytes == sizeof header + Executor::kInlineHeaderMax) {  // where a header lands
        std::copy(header, header + sizeof header, d);
        bytes = sizeof header;
        if (inline_header) {
          std::fill_n(reinterpret_cast<float*>(d + sizeof header), n, value);
          bytes += n * sizeof(float);
        }
      } else {  // a large message's data, after its header
        std::fill_n(reinterpret_cast<float*>(d), n, value);
      }
      ASSERT_TRUE((*ex)->on_completion(conn.complete_front(Status::ok(), bytes)).is_ok());
      ASSERT_TRUE((*ex)->progress().is_ok());
    }
    EXPECT_TRUE(sent_header);
    EXPECT_EQ((*ex)->outstanding(), 0u);
  };
  Status early = (*ex)->rebind(in2.data(), out2.data(), 4);  // not run yet, so not done
  EXPECT_EQ(early.code(), ErrorCode::internal);
  EXPECT_NE(early.message().find("reduce (chain) on rank 0: rebind while the previous run is unfinished"),
            std::string::npos)
      << early.message();
  run(3, 2.0f);
  EXPECT_EQ(out1[0], 3.0f);
  EXPECT_EQ(out1[n - 1], 3.0f);
  EXPECT_EQ(checked, 1);

  ASSERT_TRUE((*ex)->rebind(in2.data(), out2.data(), 4).is_ok());
  run(4, 10.0f);
  EXPECT_EQ(out2[0], 15.0f);
  EXPECT_EQ(out2[n - 1], 15.0f);
  EXPECT_EQ(out1[0], 3.0f) << "the first run's output is left alone";
  EXPECT_EQ(checked, 2) << "the second run checks its peer's header again";
}

INSTANTIATE_TEST_SUITE_P(Sizes, ExecutorRunsAgain, ::testing::Values(16, 64 << 10));

}  // namespace
}  // namespace braid::collectives
