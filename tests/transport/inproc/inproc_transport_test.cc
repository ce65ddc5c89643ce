#include "transport/inproc/inproc_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

namespace braid::transport::inproc {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kComm = 7;

// Polls `t` until `n` completions have arrived or 5 s passed (a detection bound, not a speed test).
std::vector<Completion> wait_for(Transport& t, size_t n) {
  std::vector<Completion> got;
  Deadline deadline = Deadline::after(5s);
  while (got.size() < n && !deadline.expired()) {
    EXPECT_TRUE(t.poll(got, 10ms).is_ok());
  }
  EXPECT_EQ(got.size(), n);
  return got;
}

// Two ranks on one fabric, connected: c0 is rank 0's end, c1 rank 1's.
struct Pair {
  Fabric fabric;
  std::unique_ptr<Transport> t0 = create_inproc_transport(fabric);
  std::unique_ptr<Transport> t1 = create_inproc_transport(fabric);
  std::unique_ptr<Connection> c0, c1;

  Pair() {
    auto addr = t1->listen();
    EXPECT_TRUE(addr.is_ok());
    auto c = t0->connect(addr.value(), PeerIdentity{kComm, 0, 1}, Deadline::after(5s));
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    c0 = std::move(c.value());
    auto a = t1->accept(PeerIdentity{kComm, 1, 0}, Deadline::after(5s));
    EXPECT_TRUE(a.is_ok()) << a.status().message();
    c1 = std::move(a.value());
  }
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

TEST(InprocTransport, ListenGivesUniqueAddresses) {
  Fabric fabric;
  auto a = create_inproc_transport(fabric);
  auto b = create_inproc_transport(fabric);
  auto la = a->listen(), lb = b->listen();
  ASSERT_TRUE(la.is_ok() && lb.is_ok());
  EXPECT_EQ(la.value().rfind("inproc:", 0), 0u);
  EXPECT_NE(la.value(), lb.value());
  EXPECT_STREQ(a->name(), "inproc");
}

TEST(InprocTransport, PingPongBetweenThreads) {
  Pair p;
  constexpr int kRounds = 200;
  std::thread echo([&] {
    std::vector<uint8_t> buf(64);
    for (int i = 0; i < kRounds; ++i) {
      ASSERT_TRUE(p.c1->post_recv(buf.data(), buf.size(), i).is_ok());
      auto got = wait_for(*p.t1, 1);
      ASSERT_EQ(got.size(), 1u);
      ASSERT_TRUE(got[0].status.is_ok());
      ASSERT_EQ(got[0].bytes, 64u);
      ASSERT_TRUE(p.c1->post_send(buf.data(), got[0].bytes, i).is_ok());
      ASSERT_EQ(wait_for(*p.t1, 1).size(), 1u);
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    auto out = pattern(64, static_cast<uint8_t>(i));
    std::vector<uint8_t> back(64);
    ASSERT_TRUE(p.c0->post_send(out.data(), out.size(), 1).is_ok());
    ASSERT_TRUE(p.c0->post_recv(back.data(), back.size(), 2).is_ok());
    auto got = wait_for(*p.t0, 2);
    ASSERT_EQ(got.size(), 2u);
    for (const Completion& c : got) {
      EXPECT_TRUE(c.status.is_ok());
      EXPECT_EQ(c.connection, p.c0.get());
      EXPECT_EQ(c.is_send, c.cookie == 1);
    }
    ASSERT_EQ(back, out);
  }
  echo.join();
}

TEST(InprocTransport, SizesReceivePostedBeforeAndAfter) {
  Pair p;
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{1} << 20}) {
    for (bool recv_first : {true, false}) {
      auto out = pattern(n, static_cast<uint8_t>(n));
      std::vector<uint8_t> in(n + 1, 0xEE);
      if (recv_first) {
        ASSERT_TRUE(p.c1->post_recv(in.data(), in.size(), 5).is_ok());
      }
      ASSERT_TRUE(p.c0->post_send(n ? out.data() : nullptr, n, 6).is_ok());
      if (!recv_first) {
        ASSERT_TRUE(p.c1->post_recv(in.data(), in.size(), 5).is_ok());
      }
      auto r = wait_for(*p.t1, 1);
      auto s = wait_for(*p.t0, 1);
      ASSERT_EQ(r.size(), 1u);
      ASSERT_EQ(s.size(), 1u);
      EXPECT_TRUE(r[0].status.is_ok());
      EXPECT_EQ(r[0].bytes, n);
      EXPECT_EQ(r[0].cookie, 5u);
      EXPECT_FALSE(r[0].is_send);
      EXPECT_TRUE(s[0].status.is_ok());
      EXPECT_EQ(s[0].bytes, n);
      EXPECT_TRUE(s[0].is_send);
      EXPECT_TRUE(std::equal(out.begin(), out.end(), in.begin())) << n;
      EXPECT_EQ(in[n], 0xEE) << "wrote past the message";
    }
  }
}

TEST(InprocTransport, ManyOutstandingArriveInOrder) {
  Pair p;
  constexpr size_t kMsgs = 1000;
  std::vector<uint64_t> sent(kMsgs), received(kMsgs, ~uint64_t{0});
  std::iota(sent.begin(), sent.end(), 0);
  // Half the receives posted before their sends, half after: both paths keep the order.
  for (size_t i = 0; i < kMsgs / 2; ++i) ASSERT_TRUE(p.c1->post_recv(&received[i], 8, i).is_ok());
  for (size_t i = 0; i < kMsgs; ++i) ASSERT_TRUE(p.c0->post_send(&sent[i], 8, i).is_ok());
  for (size_t i = kMsgs / 2; i < kMsgs; ++i) ASSERT_TRUE(p.c1->post_recv(&received[i], 8, i).is_ok());
  auto r = wait_for(*p.t1, kMsgs);
  auto s = wait_for(*p.t0, kMsgs);
  for (size_t i = 0; i < r.size(); ++i) EXPECT_TRUE(r[i].status.is_ok());
  for (size_t i = 0; i < s.size(); ++i) EXPECT_TRUE(s[i].status.is_ok());
  EXPECT_EQ(received, sent);
}

TEST(InprocTransport, BothDirectionsAtOnce) {
  Pair p;
  constexpr size_t kMsgs = 300, kBytes = 4096;
  auto run = [](Connection& c, Transport& t, uint8_t my_seed, uint8_t peer_seed) {
    std::vector<std::vector<uint8_t>> out, in(kMsgs, std::vector<uint8_t>(kBytes));
    for (size_t i = 0; i < kMsgs; ++i) out.push_back(pattern(kBytes, static_cast<uint8_t>(my_seed + i)));
    for (size_t i = 0; i < kMsgs; ++i) {
      ASSERT_TRUE(c.post_send(out[i].data(), kBytes, i).is_ok());
      ASSERT_TRUE(c.post_recv(in[i].data(), kBytes, kMsgs + i).is_ok());
    }
    auto got = wait_for(t, 2 * kMsgs);
    for (const Completion& done : got) EXPECT_TRUE(done.status.is_ok());
    for (size_t i = 0; i < kMsgs; ++i) EXPECT_EQ(in[i], pattern(kBytes, static_cast<uint8_t>(peer_seed + i))) << i;
  };
  std::thread other([&] { run(*p.c1, *p.t1, 100, 1); });
  run(*p.c0, *p.t0, 1, 100);
  other.join();
}

TEST(InprocTransport, OversizeMessageFailsThatReceiveOnly) {
  Pair p;
  auto big = pattern(100, 3), next = pattern(8, 9);
  std::vector<uint8_t> small(16, 0xEE), ok(8);
  ASSERT_TRUE(p.c0->post_send(big.data(), big.size(), 1).is_ok());
  ASSERT_TRUE(p.c0->post_send(next.data(), next.size(), 2).is_ok());
  ASSERT_TRUE(p.c1->post_recv(small.data(), 10, 3).is_ok());
  ASSERT_TRUE(p.c1->post_recv(ok.data(), ok.size(), 4).is_ok());
  auto r = wait_for(*p.t1, 2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].cookie, 3u);
  EXPECT_EQ(r[0].status.code(), ErrorCode::protocol);
  EXPECT_NE(r[0].status.message().find("100 bytes"), std::string::npos) << r[0].status.message();
  EXPECT_EQ(small, std::vector<uint8_t>(16, 0xEE)) << "the receive buffer was overrun";
  EXPECT_TRUE(r[1].status.is_ok());
  EXPECT_EQ(ok, next);
}

TEST(InprocTransport, KillFailsPendingAndFutureOpsWithPeerLost) {
  Pair p;
  std::vector<uint8_t> buf(32), data = pattern(32, 1);
  ASSERT_TRUE(p.c0->post_recv(buf.data(), buf.size(), 11).is_ok());
  ASSERT_TRUE(p.c0->post_send(data.data(), data.size(), 12).is_ok());
  p.fabric.kill(1);
  auto got = wait_for(*p.t0, 2);
  ASSERT_EQ(got.size(), 2u);
  for (const Completion& c : got) {
    EXPECT_EQ(c.status.code(), ErrorCode::peer_lost);
    EXPECT_NE(c.status.message().find("rank 1"), std::string::npos) << c.status.message();
  }
  ASSERT_TRUE(p.c0->post_send(data.data(), data.size(), 13).is_ok());
  auto later = wait_for(*p.t0, 1);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].cookie, 13u);
  EXPECT_EQ(later[0].status.code(), ErrorCode::peer_lost);
  // The dead rank's own end fails too, and nobody can connect to it any more.
  ASSERT_TRUE(p.c1->post_recv(buf.data(), buf.size(), 14).is_ok());
  EXPECT_EQ(wait_for(*p.t1, 1).at(0).status.code(), ErrorCode::peer_lost);
  auto again = p.t0->connect(p.c0->peer_address(), PeerIdentity{kComm, 0, 1}, Deadline::after(5s));
  EXPECT_EQ(again.status().code(), ErrorCode::peer_lost);
}

TEST(InprocTransport, KillWakesABlockedPoll) {
  Pair p;
  std::vector<uint8_t> buf(8);
  ASSERT_TRUE(p.c0->post_recv(buf.data(), buf.size(), 1).is_ok());
  std::thread killer([&] {
    std::this_thread::sleep_for(20ms);
    p.fabric.kill(1);
  });
  std::vector<Completion> got;
  ASSERT_TRUE(p.t0->poll(got, std::chrono::microseconds(10s)).is_ok());
  killer.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status.code(), ErrorCode::peer_lost);
}

TEST(InprocTransport, WakeInterruptsPoll) {
  Fabric fabric;
  auto t = create_inproc_transport(fabric);
  std::atomic<bool> returned{false};
  std::thread poller([&] {
    std::vector<Completion> got;
    EXPECT_TRUE(t->poll(got, std::chrono::microseconds(30s)).is_ok());
    EXPECT_TRUE(got.empty());
    returned = true;
  });
  std::this_thread::sleep_for(20ms);
  Deadline bound = Deadline::after(5s);
  while (!returned && !bound.expired()) {
    t->wake();
    std::this_thread::sleep_for(5ms);
  }
  poller.join();
  EXPECT_TRUE(returned) << "wake() did not interrupt poll() within 5 s";
}

TEST(InprocTransport, PollWithZeroTimeoutDoesNotBlock) {
  Pair p;
  std::vector<Completion> got;
  ASSERT_TRUE(p.t0->poll(got, std::chrono::microseconds(0)).is_ok());
  EXPECT_TRUE(got.empty());
}

TEST(InprocTransport, AcceptKeepsOtherPeersAndRefusesStrangers) {
  Fabric fabric;
  auto t0 = create_inproc_transport(fabric), t1 = create_inproc_transport(fabric);
  auto t2 = create_inproc_transport(fabric), stranger = create_inproc_transport(fabric);
  auto addr = t0->listen();
  ASSERT_TRUE(addr.is_ok());
  auto from2 = t2->connect(addr.value(), PeerIdentity{kComm, 2, 0}, Deadline::after(5s));
  auto from1 = t1->connect(addr.value(), PeerIdentity{kComm, 1, 0}, Deadline::after(5s));
  auto bad = stranger->connect(addr.value(), PeerIdentity{kComm + 1, 1, 0}, Deadline::after(5s));
  ASSERT_TRUE(from1.is_ok() && from2.is_ok() && bad.is_ok());
  auto a1 = t0->accept(PeerIdentity{kComm, 0, 1}, Deadline::after(5s));
  ASSERT_TRUE(a1.is_ok()) << a1.status().message();
  EXPECT_EQ(a1.value()->peer_rank(), 1);
  auto a2 = t0->accept(PeerIdentity{kComm, 0, 2}, Deadline::after(5s));
  ASSERT_TRUE(a2.is_ok()) << a2.status().message();
  EXPECT_EQ(a2.value()->peer_rank(), 2);
  // Each accepted end talks to the right peer.
  uint32_t v1 = 1, v2 = 2, r1 = 0, r2 = 0;
  ASSERT_TRUE(from1.value()->post_send(&v1, 4, 0).is_ok());
  ASSERT_TRUE(from2.value()->post_send(&v2, 4, 0).is_ok());
  ASSERT_TRUE(a1.value()->post_recv(&r1, 4, 1).is_ok());
  ASSERT_TRUE(a2.value()->post_recv(&r2, 4, 2).is_ok());
  wait_for(*t0, 2);
  EXPECT_EQ(r1, 1u);
  EXPECT_EQ(r2, 2u);
  // The stranger (another comm id) was refused: its operations fail.
  uint32_t x = 0;
  ASSERT_TRUE(bad.value()->post_send(&x, 4, 9).is_ok());
  auto refused = wait_for(*stranger, 1);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].status.code(), ErrorCode::protocol);
}

TEST(InprocTransport, AcceptAndConnectAreBounded) {
  Fabric fabric;
  auto t0 = create_inproc_transport(fabric), t1 = create_inproc_transport(fabric);
  ASSERT_TRUE(t0->listen().is_ok());
  auto a = t0->accept(PeerIdentity{kComm, 0, 1}, Deadline::after(30ms));
  EXPECT_EQ(a.status().code(), ErrorCode::timeout);
  EXPECT_NE(a.status().message().find("rank 1"), std::string::npos) << a.status().message();
  auto c = t1->connect("inproc:999", PeerIdentity{kComm, 1, 0}, Deadline::after(30ms));
  EXPECT_EQ(c.status().code(), ErrorCode::timeout);
  EXPECT_NE(c.status().message().find("inproc:999"), std::string::npos);
  auto bad = t1->connect("tcp://x", PeerIdentity{kComm, 1, 0}, Deadline::after(30ms));
  EXPECT_EQ(bad.status().code(), ErrorCode::invalid_argument);
}

TEST(InprocTransport, ConnectWaitsForALateListener) {
  Fabric fabric;
  auto t0 = create_inproc_transport(fabric), t1 = create_inproc_transport(fabric);
  // Transport ids are handed out in creation order, so t1's address is known before it listens.
  const std::string t1_address = "inproc:1";
  std::thread late([&] {
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(t1->listen().value(), t1_address);
  });
  auto c = t0->connect(t1_address, PeerIdentity{kComm, 0, 1}, Deadline::after(5s));
  late.join();
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  auto a = t1->accept(PeerIdentity{kComm, 1, 0}, Deadline::after(5s));
  ASSERT_TRUE(a.is_ok()) << a.status().message();
}

TEST(InprocTransport, CloseAbortsOwnOpsAndPeerSeesPeerLost) {
  Pair p;
  std::vector<uint8_t> a(8), b(8);
  ASSERT_TRUE(p.c0->post_recv(a.data(), a.size(), 1).is_ok());
  ASSERT_TRUE(p.c1->post_recv(b.data(), b.size(), 2).is_ok());
  p.c0->close();
  auto mine = wait_for(*p.t0, 1);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].status.code(), ErrorCode::aborted);
  auto theirs = wait_for(*p.t1, 1);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(theirs[0].status.code(), ErrorCode::peer_lost);
  EXPECT_EQ(p.c0->post_send(a.data(), a.size(), 3).code(), ErrorCode::aborted);
}

}  // namespace
}  // namespace braid::transport::inproc
