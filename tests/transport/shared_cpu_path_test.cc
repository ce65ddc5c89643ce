// The shared-CPU path (transport/tcp/shared_cpu_path.h): an engine whose only peer is confined to
// the same single CPU drives that socket with blocking calls. Two transports of this process,
// their connecting threads pinned to one CPU as two `taskset -c N` ranks would be, each driven by
// its own thread with blocking polls, so receives really sleep in recv().
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/transport/transport_link.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/tcp_transport.h"

namespace braid::transport::testing {
namespace {

using namespace std::chrono_literals;
using braid::testing::usable_cpu;
using Clock = std::chrono::steady_clock;

uint64_t blocking_receives(const std::unique_ptr<Transport>& t) {
  return dynamic_cast<tcp::TcpTransport&>(*t).engine_stats().shared_cpu_receives;
}

// Polls `t` until `want` completions arrived (appended to `out`) or 20 s passed; false then.
bool await(Transport& t, std::vector<Completion>& out, size_t want) {
  const auto end = Clock::now() + 20s;
  while (out.size() < want) {
    if (Clock::now() > end || !t.poll(out, 100ms).is_ok()) return false;
  }
  return true;
}

class SharedCpuPathTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const auto& e : transport_registry()) {  // an engine this build or machine cannot run
      if (e.name == GetParam() && !e.available) GTEST_SKIP() << e.name << " unavailable: " << e.unavailable_reason;
    }
    cpu_ = usable_cpu(0);
    ASSERT_GE(cpu_, 0);
    Status s = make_pinned_link(GetParam(), cpu_, cpu_, link_);
    ASSERT_TRUE(s.is_ok()) << s.message();
    ASSERT_TRUE(dynamic_cast<tcp::TcpConnection&>(*link_.ca).peer_shares_cpu());
  }

  // `rounds` round trips of `size` bytes: b sends, a echoes; each side polls with blocking
  // timeouts on its own thread. Fails the test on a wrong byte or a failed operation.
  void ping_pong(Connection& ca, Transport& ta, Connection& cb, Transport& tb, int rounds, size_t size) {
    std::thread echo([&] {
      std::vector<unsigned char> buf(size);
      std::vector<Completion> done;
      for (int i = 0; i < rounds; ++i) {
        done.clear();
        ASSERT_TRUE(ca.post_recv(buf.data(), size, 0).is_ok());
        ASSERT_TRUE(await(ta, done, 1)) << "echo side, round " << i;
        ASSERT_TRUE(done[0].status.is_ok()) << done[0].status.message();
        ASSERT_TRUE(ca.post_send(buf.data(), size, 1).is_ok());
        ASSERT_TRUE(await(ta, done, 2)) << "echo side, round " << i;
        ASSERT_TRUE(done[1].status.is_ok()) << done[1].status.message();
      }
    });
    std::vector<unsigned char> out(size), in(size);
    std::vector<Completion> done;
    for (int i = 0; i < rounds; ++i) {
      fill(out, static_cast<uint64_t>(i));
      done.clear();
      ASSERT_TRUE(cb.post_recv(in.data(), size, 0).is_ok());
      ASSERT_TRUE(cb.post_send(out.data(), size, 1).is_ok());
      ASSERT_TRUE(await(tb, done, 2)) << "round " << i;
      for (const auto& c : done) ASSERT_TRUE(c.status.is_ok()) << c.status.message();
      ASSERT_TRUE(check(in.data(), size, static_cast<uint64_t>(i))) << "round " << i << ", " << size << " bytes";
    }
    echo.join();
  }

  int cpu_ = 0;
  Link link_;
};

TEST_P(SharedCpuPathTest, RoundTripsSleepInTheReceive) {
  // Small messages: every receive is one recv() that may sleep, none waits in poll(). (The first
  // round trip may be read before the hand-over: the connector learns that its peer shares our
  // CPU from the answer, which the engine reads together with whatever follows it.)
  ping_pong(*link_.ca, *link_.a, *link_.cb, *link_.b, 1, 8);
  const uint64_t a_before = blocking_receives(link_.a), b_before = blocking_receives(link_.b);
  ping_pong(*link_.ca, *link_.a, *link_.cb, *link_.b, 50, 8);
  EXPECT_GE(blocking_receives(link_.a) - a_before, 50u);
  EXPECT_GE(blocking_receives(link_.b) - b_before, 50u);
  for (size_t size : {size_t{1000}, size_t{300000}}) {
    ping_pong(*link_.ca, *link_.a, *link_.cb, *link_.b, 50, size);
  }
  EXPECT_GT(blocking_receives(link_.a), 0u) << "the acceptor's engine never took the shared-CPU path";
  EXPECT_GT(blocking_receives(link_.b), 0u) << "the connector's engine never took the shared-CPU path";
}

// Both ends send 16 MiB at once: each send fills the socket buffers while the peer is sending
// too, so the path waits for buffer space (poll) as well as for bytes.
TEST_P(SharedCpuPathTest, LargeMessagesBothWaysAtOnce) {
  const size_t size = 16 << 20;
  std::vector<unsigned char> out_a(size), out_b(size), in_a(size), in_b(size);
  fill(out_a, 1);
  fill(out_b, 2);
  std::thread side_a([&] {
    std::vector<Completion> done;
    ASSERT_TRUE(link_.ca->post_recv(in_a.data(), size, 0).is_ok());
    ASSERT_TRUE(link_.ca->post_send(out_a.data(), size, 1).is_ok());
    ASSERT_TRUE(await(*link_.a, done, 2));
    for (const auto& c : done) ASSERT_TRUE(c.status.is_ok()) << c.status.message();
  });
  std::vector<Completion> done;
  ASSERT_TRUE(link_.cb->post_recv(in_b.data(), size, 0).is_ok());
  ASSERT_TRUE(link_.cb->post_send(out_b.data(), size, 1).is_ok());
  ASSERT_TRUE(await(*link_.b, done, 2));
  side_a.join();
  for (const auto& c : done) ASSERT_TRUE(c.status.is_ok()) << c.status.message();
  EXPECT_TRUE(check(in_a.data(), size, 2));
  EXPECT_TRUE(check(in_b.data(), size, 1));
}

// While the path has the socket, a small message with nothing queued before it goes to the
// kernel from post_send and completes there (TcpConnection::send_now). Once the socket buffers
// are full such a send is queued, with whatever part of the frame the kernel took, and the path
// sends the rest later: every message must arrive whole, once, in order, and every send complete
// in the order it was posted, small ones sent at once and larger ones (queued) mixed.
TEST_P(SharedCpuPathTest, SmallSendsThatFillTheSocketArriveInOrder) {
  ping_pong(*link_.ca, *link_.a, *link_.cb, *link_.b, 1, 8);  // both ends on the path now
  constexpr int kMessages = 150000;
  auto size_of = [](int i) { return i % 97 == 0 ? size_t{1000} : 1 + static_cast<size_t>(i) % 224; };
  std::vector<std::vector<unsigned char>> out(kMessages);
  for (int i = 0; i < kMessages; ++i) {
    out[i].resize(size_of(i));
    fill(out[i], static_cast<uint64_t>(i));
  }
  std::thread reader;
  auto start_reader = [&] {
    reader = std::thread([&] {
      std::vector<unsigned char> in(1024);
      std::vector<Completion> got;
      for (int i = 0; i < kMessages; ++i) {
        got.clear();
        ASSERT_TRUE(link_.ca->post_recv(in.data(), in.size(), 0).is_ok());
        ASSERT_TRUE(await(*link_.a, got, 1)) << "message " << i << " never came";
        ASSERT_TRUE(got[0].status.is_ok()) << got[0].status.message();
        ASSERT_EQ(got[0].bytes, size_of(i)) << "message " << i;
        ASSERT_TRUE(check(in.data(), size_of(i), static_cast<uint64_t>(i))) << "message " << i;
      }
    });
  };
  std::vector<Completion> sent;
  bool filled = false;  // a send found the socket full
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(link_.cb->post_send(out[i].data(), out[i].size(), static_cast<uint64_t>(i)).is_ok());
    ASSERT_TRUE(link_.b->poll(sent, 0us).is_ok());
    if (!filled && sent.size() < static_cast<size_t>(i) + 1) {
      filled = true;
      start_reader();
    }
    while (static_cast<size_t>(i) + 1 - sent.size() >= 2000) ASSERT_TRUE(link_.b->poll(sent, 100ms).is_ok());
  }
  if (!filled) start_reader();
  EXPECT_TRUE(await(*link_.b, sent, kMessages));
  reader.join();
  EXPECT_TRUE(filled) << "the socket never filled: the test proves nothing";
  ASSERT_EQ(sent.size(), static_cast<size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(sent[i].status.is_ok()) << sent[i].status.message();
    ASSERT_EQ(sent[i].cookie, static_cast<uint64_t>(i)) << "sends completed out of order";
    ASSERT_EQ(sent[i].bytes, size_of(i));
  }
}

// A poll that returns (its timeout) while a send waits for buffer space leaves that send to the
// next poll, which must go on with it rather than wait only for bytes.
TEST_P(SharedCpuPathTest, ASendLeftWaitingByOnePollGoesOnInTheNext) {
  ping_pong(*link_.ca, *link_.a, *link_.cb, *link_.b, 1, 8);  // both ends on the path now
  const size_t size = 16 << 20;
  std::vector<unsigned char> out(size), in(size);
  fill(out, 3);
  std::vector<Completion> sent;
  ASSERT_TRUE(link_.cb->post_send(out.data(), size, 1).is_ok());
  ASSERT_TRUE(link_.b->poll(sent, 1ms).is_ok());  // nobody reads yet: the send is left waiting
  ASSERT_TRUE(sent.empty()) << "16 MiB fitted into the socket buffers: the test proves nothing";
  std::thread reader([&] {
    std::vector<Completion> got;
    ASSERT_TRUE(link_.ca->post_recv(in.data(), size, 0).is_ok());
    ASSERT_TRUE(await(*link_.a, got, 1)) << "the rest of the message never came";
    EXPECT_TRUE(got[0].status.is_ok()) << got[0].status.message();
  });
  EXPECT_TRUE(await(*link_.b, sent, 1));
  reader.join();
  EXPECT_TRUE(check(in.data(), size, 3));
}

// A receive that sleeps in recv() cannot be interrupted: wake() must still end the poll within a
// slice or two, not at the poll's timeout.
TEST_P(SharedCpuPathTest, WakeEndsABlockedReceive) {
  unsigned char buf[8];
  ASSERT_TRUE(link_.ca->post_recv(buf, sizeof buf, 0).is_ok());
  std::vector<Completion> done;
  const uint64_t before = blocking_receives(link_.a);
  std::atomic<bool> returned{false};
  Clock::time_point woke_at{}, returned_at{};
  std::thread poller([&] {
    ASSERT_TRUE(link_.a->poll(done, 20s).is_ok());
    returned_at = Clock::now();
    returned = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(returned.load()) << "poll returned before the wake-up";
  woke_at = Clock::now();
  link_.a->wake();
  poller.join();
  EXPECT_TRUE(done.empty());
  EXPECT_LT(returned_at - woke_at, 2s) << "wake() did not end the blocked receive";
  EXPECT_GT(blocking_receives(link_.a), before) << "the poll did not sleep in recv()";
}

// A poll's timeout holds: shorter than a slice (poll() on the socket) and longer (blocking
// receives, each bounded by a slice).
TEST_P(SharedCpuPathTest, TimeoutsAreKept) {
  unsigned char buf[8];
  ASSERT_TRUE(link_.ca->post_recv(buf, sizeof buf, 0).is_ok());
  std::vector<Completion> done;
  for (auto timeout : {std::chrono::microseconds(500), std::chrono::microseconds(30000)}) {
    const auto start = Clock::now();
    ASSERT_TRUE(link_.a->poll(done, timeout).is_ok());
    const auto took = Clock::now() - start;
    EXPECT_TRUE(done.empty());
    EXPECT_GE(took, timeout / 2) << "returned long before its timeout of " << timeout.count() << " us";
    EXPECT_LT(took, timeout + 1s) << "overran its timeout of " << timeout.count() << " us";
  }
}

// A peer that goes away fails a receive sleeping in recv() at once, not at the poll's timeout.
TEST_P(SharedCpuPathTest, APeerThatClosesFailsTheBlockedReceive) {
  unsigned char buf[8];
  ASSERT_TRUE(link_.ca->post_recv(buf, sizeof buf, 0).is_ok());
  std::vector<Completion> done;
  std::thread closer([&] {
    std::this_thread::sleep_for(100ms);
    link_.cb.reset();
  });
  const auto start = Clock::now();
  while (done.empty() && Clock::now() - start < 20s) ASSERT_TRUE(link_.a->poll(done, 10s).is_ok());
  closer.join();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), ErrorCode::peer_lost) << done[0].status.message();
  EXPECT_NE(done[0].status.message().find("rank 1"), std::string::npos) << done[0].status.message();
  EXPECT_LT(Clock::now() - start, 5s);
}

// A second connection on the same transport hands the first socket back to the engine (it can
// no longer sleep in one socket's recv), and closing it hands the socket to the path again.
TEST_P(SharedCpuPathTest, ASecondConnectionTakesTheSocketBack) {
  auto tc = create_transport(GetParam(), loopback_options());
  ASSERT_TRUE(tc.is_ok());
  Result<std::unique_ptr<Connection>> ac = Status(ErrorCode::internal, "accept did not run");
  Result<std::unique_ptr<Connection>> cc = Status(ErrorCode::internal, "connect did not run");
  std::thread acceptor([&] { on_cpu(cpu_, [&] { ac = link_.a->accept({7, 0, 2}, Deadline::after(20s)); }); });
  on_cpu(cpu_, [&] {
    auto addr = link_.a->listen();
    ASSERT_TRUE(addr.is_ok());
    cc = tc.value()->connect(addr.value(), {7, 2, 0}, Deadline::after(20s));
  });
  acceptor.join();
  ASSERT_TRUE(ac.is_ok()) << ac.status().message();
  ASSERT_TRUE(cc.is_ok()) << cc.status().message();
  // a now drives two connections: both must work, each echoing on a's one thread in turn.
  const uint64_t while_two = blocking_receives(link_.a);
  ping_pong(*link_.ca, *link_.a, *link_.cb, *link_.b, 20, 1000);
  ping_pong(*ac.value(), *link_.a, *cc.value(), *tc.value(), 20, 1000);
  EXPECT_EQ(blocking_receives(link_.a), while_two) << "a slept in one socket's recv() while it had two";
  ac.value().reset();  // back to one connection: the path takes it again
  ping_pong(*link_.ca, *link_.a, *link_.cb, *link_.b, 20, 1000);
  EXPECT_GT(blocking_receives(link_.a), while_two);
}

auto engine_name = [](const auto& info) { return std::string(info.param == "tcp" ? "io_uring" : "epoll"); };
INSTANTIATE_TEST_SUITE_P(Engines, SharedCpuPathTest, ::testing::Values("tcp", "tcp-poll"), engine_name);

}  // namespace
}  // namespace braid::transport::testing
