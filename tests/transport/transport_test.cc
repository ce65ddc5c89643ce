// The same behaviour from every transport: tcp over io_uring, tcp over epoll, inproc.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "braid_config.h"
#include "tests/transport/transport_link.h"
#include "transport/common/socket_address.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/wire_format.h"

namespace braid::transport::testing {
namespace {

#if BRAID_HAVE_INPROC
using inproc_fabric_t = inproc::Fabric;
#else
struct inproc_fabric_t {};
#endif

using namespace std::chrono_literals;

class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& name = GetParam();
    for (const auto& e : transport_registry()) {
      if (e.name == name && !e.available) GTEST_SKIP() << name << " unavailable: " << e.unavailable_reason;
    }
#if BRAID_HAVE_INPROC
    fabric_ = std::make_unique<inproc::Fabric>();
#endif
    oa_ = loopback_options();
    ob_ = loopback_options();
    oa_.inproc_fabric = ob_.inproc_fabric = fabric_.get();
  }
  bool is_tcp() const { return GetParam() == "tcp" || GetParam() == "tcp-poll"; }
  void join() { ASSERT_TRUE(make_link(GetParam(), oa_, ob_, link_).is_ok()) << make_link_error(); }
  std::string make_link_error() { return link_.error.message(); }

  // Sends `sizes` from b to a (all posted at once) and checks every byte and the order.
  void transfer(const std::vector<size_t>& sizes) {
    std::vector<std::vector<unsigned char>> out(sizes.size()), in(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      out[i].resize(sizes[i]);
      fill(out[i], i);
      in[i].assign(sizes[i] + 16, 0);
      ASSERT_TRUE(link_.ca->post_recv(in[i].data(), in[i].size(), 1000 + i).is_ok());
      ASSERT_TRUE(link_.cb->post_send(out[i].data(), out[i].size(), 2000 + i).is_ok());
    }
    ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == sizes.size() && link_.done_b.size() == sizes.size(); }))
        << "received " << link_.done_a.size() << ", sent " << link_.done_b.size() << " of " << sizes.size()
        << " " << link_.error.message();
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Completion& r = link_.done_a[i];
      ASSERT_TRUE(r.status.is_ok()) << r.status.message();
      EXPECT_EQ(r.cookie, 1000 + i);
      EXPECT_FALSE(r.is_send);
      EXPECT_EQ(r.bytes, sizes[i]);
      EXPECT_EQ(r.connection, link_.ca.get());
      EXPECT_TRUE(check(in[i].data(), sizes[i], i)) << "message " << i << " of " << sizes[i] << " bytes differs";
      EXPECT_TRUE(link_.done_b[i].status.is_ok());
      EXPECT_EQ(link_.done_b[i].cookie, 2000 + i);
      EXPECT_TRUE(link_.done_b[i].is_send);
    }
  }

  std::unique_ptr<inproc_fabric_t> fabric_;
  TransportOptions oa_, ob_;
  Link link_;
};

TEST_P(TransportTest, SizesZeroOneOddLarge) {
  join();
  transfer({0, 1, 7, 1000, 4096, 65537, (1u << 20) + 3, 0, 1});
}

TEST_P(TransportTest, ManyOutstandingOperations) {
  join();
  std::vector<size_t> sizes;
  for (size_t i = 0; i < 1000; ++i) sizes.push_back((i * 37) % 3000);
  transfer(sizes);
}

TEST_P(TransportTest, StripedAcrossSockets) {
  oa_.env.nsocks = ob_.env.nsocks = 4;
  join();
  transfer({0, 1, 300000, (8u << 20) + 5, 17, (1u << 20) + 1});
}

TEST_P(TransportTest, OneGiBStreamedThroughSmallBuffers) {
  join();
  constexpr size_t kMessage = 1 << 20, kSlots = 4, kTotal = size_t{1} << 30, kCount = kTotal / kMessage;
  std::vector<std::vector<unsigned char>> out(kSlots, std::vector<unsigned char>(kMessage));
  std::vector<std::vector<unsigned char>> in(kSlots, std::vector<unsigned char>(kMessage));
  size_t posted_send = 0, posted_recv = 0, received = 0, sent = 0;
  auto refill = [&] {
    while (posted_recv < kCount && posted_recv - received < kSlots) {
      ASSERT_TRUE(link_.ca->post_recv(in[posted_recv % kSlots].data(), kMessage, posted_recv).is_ok());
      ++posted_recv;
    }
    while (posted_send < kCount && posted_send - sent < kSlots) {
      auto& buf = out[posted_send % kSlots];
      buf[0] = static_cast<unsigned char>(posted_send);  // cheap per-message mark
      buf[kMessage - 1] = static_cast<unsigned char>(posted_send * 3);
      ASSERT_TRUE(link_.cb->post_send(buf.data(), kMessage, posted_send).is_ok());
      ++posted_send;
    }
  };
  refill();
  bool ok = link_.drive([&] {
    for (const Completion& c : link_.done_a) {
      EXPECT_TRUE(c.status.is_ok()) << c.status.message();
      EXPECT_EQ(c.cookie, received);
      auto& buf = in[received % kSlots];
      EXPECT_EQ(buf[0], static_cast<unsigned char>(received));
      EXPECT_EQ(buf[kMessage - 1], static_cast<unsigned char>(received * 3));
      ++received;
    }
    for (const Completion& c : link_.done_b) {
      EXPECT_TRUE(c.status.is_ok());
      ++sent;
    }
    link_.done_a.clear();
    link_.done_b.clear();
    refill();
    return received == kCount && sent == kCount;
  }, 120s);
  EXPECT_TRUE(ok) << received << " of " << kCount << " messages arrived";
}

TEST_P(TransportTest, BothDirectionsAtOnce) {
  join();
  constexpr size_t kCount = 32, kBytes = (256 << 10) + 11;
  std::vector<std::vector<unsigned char>> ab(kCount), ba(kCount), in_a(kCount), in_b(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    ab[i].resize(kBytes), ba[i].resize(kBytes), in_a[i].resize(kBytes), in_b[i].resize(kBytes);
    fill(ab[i], i), fill(ba[i], i + 100);
    ASSERT_TRUE(link_.ca->post_recv(in_a[i].data(), kBytes, i).is_ok());
    ASSERT_TRUE(link_.cb->post_recv(in_b[i].data(), kBytes, i).is_ok());
    ASSERT_TRUE(link_.ca->post_send(ab[i].data(), kBytes, i).is_ok());
    ASSERT_TRUE(link_.cb->post_send(ba[i].data(), kBytes, i).is_ok());
  }
  ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 2 * kCount && link_.done_b.size() == 2 * kCount; }));
  for (size_t i = 0; i < kCount; ++i) {
    EXPECT_TRUE(check(in_b[i].data(), kBytes, i));
    EXPECT_TRUE(check(in_a[i].data(), kBytes, i + 100));
  }
  for (const auto& c : link_.done_a) EXPECT_TRUE(c.status.is_ok()) << c.status.message();
  for (const auto& c : link_.done_b) EXPECT_TRUE(c.status.is_ok()) << c.status.message();
}

TEST_P(TransportTest, OversizeMessageFailsThatReceiveOnly) {
  join();
  std::vector<unsigned char> big(100), small(10), next(50), in_next(64);
  fill(big, 1), fill(next, 2);
  ASSERT_TRUE(link_.ca->post_recv(small.data(), small.size(), 1).is_ok());
  ASSERT_TRUE(link_.ca->post_recv(in_next.data(), in_next.size(), 2).is_ok());
  ASSERT_TRUE(link_.cb->post_send(big.data(), big.size(), 1).is_ok());
  ASSERT_TRUE(link_.cb->post_send(next.data(), next.size(), 2).is_ok());
  ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() >= 1 && link_.done_b.size() == 2; }, 10s));
  EXPECT_EQ(link_.done_a[0].status.code(), ErrorCode::protocol) << link_.done_a[0].status.message();
  EXPECT_NE(link_.done_a[0].status.message().find("100"), std::string::npos) << link_.done_a[0].status.message();
  if (is_tcp()) {  // tcp drains the oversize message and goes on with the next one
    ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 2; }, 10s));
    EXPECT_TRUE(link_.done_a[1].status.is_ok()) << link_.done_a[1].status.message();
    EXPECT_EQ(link_.done_a[1].bytes, 50u);
    EXPECT_TRUE(check(in_next.data(), 50, 2));
  }
}

TEST_P(TransportTest, CloseAbortsPendingReceives) {
  join();
  std::vector<unsigned char> in(64);
  ASSERT_TRUE(link_.ca->post_recv(in.data(), in.size(), 5).is_ok());
  link_.ca->close();
  ASSERT_TRUE(link_.drive([&] { return !link_.done_a.empty(); }, 10s));
  EXPECT_EQ(link_.done_a[0].status.code(), ErrorCode::aborted) << link_.done_a[0].status.message();
  EXPECT_EQ(link_.done_a[0].cookie, 5u);
}

TEST_P(TransportTest, PeerCloseFailsPendingReceiveAsPeerLost) {
  join();
  std::vector<unsigned char> in(64);
  ASSERT_TRUE(link_.ca->post_recv(in.data(), in.size(), 5).is_ok());
  link_.cb->close();
  link_.cb.reset();
  ASSERT_TRUE(link_.drive([&] { return !link_.done_a.empty(); }, 10s));
  EXPECT_EQ(link_.done_a[0].status.code(), ErrorCode::peer_lost) << link_.done_a[0].status.message();
  EXPECT_NE(link_.done_a[0].status.message().find("rank 1"), std::string::npos) << link_.done_a[0].status.message();
}

// peer_ended() (which shrink asks to tell a dead rank from a slow one): false while the peer is
// there, this end's own close() included; true once the peer's end is gone, whether this end
// closed before or not.
TEST_P(TransportTest, PeerEndedSaysWhetherThePeersEndIsGone) {
  if (GetParam() == "inproc") GTEST_SKIP() << "inproc cannot tell (peer_ended() is always false)";
  for (bool close_first : {false, true}) {
    SCOPED_TRACE(close_first ? "this end closed first" : "this end open");
    join();
    EXPECT_FALSE(link_.ca->peer_ended());
    if (close_first) link_.ca->close();
    std::this_thread::sleep_for(50ms);  // what this end's close sent has arrived
    EXPECT_FALSE(link_.ca->peer_ended());
    link_.cb.reset();
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!link_.ca->peer_ended() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(link_.ca->peer_ended());
    link_.ca.reset();  // connections before their transports
    link_ = Link();
  }
}

// A peer may send its last messages and close before this end asks for them (a rank that
// finished its part of a collective first): they are still received; only a receive beyond
// them fails.
TEST_P(TransportTest, MessagesSentBeforeThePeerClosedAreStillReceived) {
  if (GetParam() == "inproc") GTEST_SKIP() << "inproc's sends complete only when a receive takes them";
  join();
  std::vector<unsigned char> out0(8), out1(4000), in0(8), in1(4000), in2(8);
  fill(out0, 1);
  fill(out1, 2);
  ASSERT_TRUE(link_.cb->post_send(out0.data(), out0.size(), 1).is_ok());
  ASSERT_TRUE(link_.cb->post_send(out1.data(), out1.size(), 2).is_ok());
  ASSERT_TRUE(link_.drive([&] { return link_.done_b.size() == 2; }, 10s));
  link_.cb->close();
  link_.cb.reset();
  const auto settle = std::chrono::steady_clock::now() + 300ms;  // this end sees the close first
  link_.drive([&] { return std::chrono::steady_clock::now() > settle; }, 10s);
  ASSERT_TRUE(link_.done_a.empty());
  ASSERT_TRUE(link_.ca->post_recv(in0.data(), in0.size(), 10).is_ok());
  ASSERT_TRUE(link_.ca->post_recv(in1.data(), in1.size(), 11).is_ok());
  ASSERT_TRUE(link_.ca->post_recv(in2.data(), in2.size(), 12).is_ok());
  ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 3; }, 10s));
  for (const Completion& c : link_.done_a) {
    if (c.cookie == 12) {
      EXPECT_EQ(c.status.code(), ErrorCode::peer_lost) << c.status.message();
    } else {
      EXPECT_TRUE(c.status.is_ok()) << c.cookie << ": " << c.status.message();
    }
  }
  EXPECT_TRUE(check(in0.data(), in0.size(), 1));
  EXPECT_TRUE(check(in1.data(), in1.size(), 2));
}

// The same over several sockets: a message's frames go to one socket or are striped over all
// of them, so the end of one socket (its last frame read, then EOF) can come before frames the
// others still hold. Only a receive beyond everything sent fails.
TEST_P(TransportTest, MessagesSentBeforeThePeerClosedAreStillReceivedOverSeveralSockets) {
  if (!is_tcp()) GTEST_SKIP() << "several sockets per peer are a tcp setting";
  oa_.env.nsocks = ob_.env.nsocks = 4;
  join();
  const std::vector<size_t> sizes = {8, 4000, 8, (1u << 20) + 3, 17, 60000, 8, 8};
  std::vector<std::vector<unsigned char>> out(sizes.size()), in(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    out[i].resize(sizes[i]);
    in[i].resize(sizes[i]);
    fill(out[i], i + 1);
    ASSERT_TRUE(link_.cb->post_send(out[i].data(), out[i].size(), i).is_ok());
  }
  ASSERT_TRUE(link_.drive([&] { return link_.done_b.size() == sizes.size(); }, 10s));
  link_.cb->close();
  link_.cb.reset();
  const auto settle = std::chrono::steady_clock::now() + 300ms;  // every EOF is there before any receive
  link_.drive([&] { return std::chrono::steady_clock::now() > settle; }, 10s);
  ASSERT_TRUE(link_.done_a.empty());
  for (size_t i = 0; i < sizes.size(); ++i) ASSERT_TRUE(link_.ca->post_recv(in[i].data(), in[i].size(), i).is_ok());
  std::vector<unsigned char> beyond(8);
  ASSERT_TRUE(link_.ca->post_recv(beyond.data(), beyond.size(), 99).is_ok());
  ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == sizes.size() + 1; }, 10s));
  for (const Completion& c : link_.done_a) {
    if (c.cookie == 99) {
      EXPECT_EQ(c.status.code(), ErrorCode::peer_lost) << c.status.message();
    } else {
      EXPECT_TRUE(c.status.is_ok()) << c.cookie << ": " << c.status.message();
      EXPECT_TRUE(check(in[c.cookie].data(), in[c.cookie].size(), c.cookie + 1)) << c.cookie;
    }
  }
}

TEST_P(TransportTest, WakeEndsABlockedPoll) {
  join();
  std::thread waker([&] {
    std::this_thread::sleep_for(100ms);
    link_.a->wake();
  });
  std::vector<Completion> out;
  auto start = std::chrono::steady_clock::now();
  Status s = link_.a->poll(out, std::chrono::microseconds(std::chrono::seconds(20)));
  waker.join();
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

// Three parties (tcp): ranks 1 and 2 connect to rank 0, each on its own thread, while rank 0
// accepts rank 2 first and then rank 1. With `two_after_one`, rank 2 connects only once rank 1's
// connect() returned, which it does only when rank 0 answers it during its accept() for rank 2.
// Every connect and accept must succeed within `limit`; the accepted connections must be to the
// ranks asked for.
void accept_rank_2_then_1(const std::string& name, const TransportOptions& oa, const TransportOptions& ob,
                          std::chrono::seconds limit, bool two_after_one) {
  auto a = create_transport(name, oa);
  auto b = create_transport(name, ob);
  auto c = create_transport(name, ob);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  auto addr = a.value()->listen();
  ASSERT_TRUE(addr.is_ok());
  auto d = Deadline::after(limit);
  std::atomic<bool> rank1_connected{false};
  Result<std::unique_ptr<Connection>> from1 = Status(ErrorCode::internal, "not run");
  Result<std::unique_ptr<Connection>> from2 = from1.status();
  std::thread one([&] {
    from1 = b.value()->connect(addr.value(), PeerIdentity{7, 1, 0}, d);
    rank1_connected = true;
  });
  std::thread two([&] {
    while (two_after_one && !rank1_connected && !d.expired()) std::this_thread::sleep_for(1ms);
    from2 = c.value()->connect(addr.value(), PeerIdentity{7, 2, 0}, d);
  });
  auto got2 = a.value()->accept(PeerIdentity{7, 0, 2}, d);  // rank 1's connection may arrive first
  auto got1 = a.value()->accept(PeerIdentity{7, 0, 1}, d);
  one.join();
  two.join();
  ASSERT_TRUE(from1.is_ok()) << from1.status().message();
  ASSERT_TRUE(from2.is_ok()) << from2.status().message();
  ASSERT_TRUE(got2.is_ok()) << got2.status().message();
  ASSERT_TRUE(got1.is_ok()) << got1.status().message();
  EXPECT_EQ(got2.value()->peer_rank(), 2);
  EXPECT_EQ(got1.value()->peer_rank(), 1);
}

// connect() waits for the acceptor's answer, which the first accept() gives both.
TEST_P(TransportTest, AcceptKeepsOtherPeersForTheirOwnCall) {
  if (!is_tcp()) GTEST_SKIP() << "three-party setup is exercised for tcp";
  accept_rank_2_then_1(GetParam(), oa_, ob_, 10s, /*two_after_one=*/false);
}

// Rank 1 first waits for rank 2 (whose connection arrives later), then for rank 1, whose
// connection is answered while accept() waits for rank 2: the connector never waits on an
// acceptor that is busy elsewhere.
TEST_P(TransportTest, AcceptAnswersEveryPeerWhileWaitingForAnother) {
  if (!is_tcp()) GTEST_SKIP() << "three-party setup is exercised for tcp";
  accept_rank_2_then_1(GetParam(), oa_, ob_, 20s, /*two_after_one=*/true);
}

TEST_P(TransportTest, StrangersAreRefusedAndTheListenerKeepsServing) {
  if (!is_tcp()) GTEST_SKIP() << "strangers need sockets";
  auto a = create_transport(GetParam(), oa_);
  auto b = create_transport(GetParam(), ob_);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto addr = a.value()->listen();
  ASSERT_TRUE(addr.is_ok());
  auto to = transport::SocketAddress::parse(addr.value());
  ASSERT_TRUE(to.is_ok());
  auto raw_connect = [&](const void* bytes, size_t n) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(::connect(fd, to.value().get(), to.value().length), 0);
    if (n > 0) {
      EXPECT_EQ(::send(fd, bytes, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
    }
    return fd;
  };
  const char garbage[] = "GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxx";
  transport::Handshake other_comm;
  other_comm.comm_id = 99, other_comm.from_rank = 1, other_comm.to_rank = 0;
  transport::Handshake old_version;  // a version 1 peer: its handshake had 32 bytes
  old_version.version = 1, old_version.comm_id = 7, old_version.from_rank = 1;
  std::vector<int> fds = {raw_connect(garbage, 32), raw_connect(nullptr, 0),
                          raw_connect(&other_comm, sizeof other_comm), raw_connect(&old_version, 32)};
  auto d = Deadline::after(20s);
  Result<std::unique_ptr<Connection>> from1 = Status(ErrorCode::internal, "not run");
  std::thread connector([&] { from1 = b.value()->connect(addr.value(), PeerIdentity{7, 1, 0}, d); });
  auto got = a.value()->accept(PeerIdentity{7, 0, 1}, d);
  connector.join();
  ASSERT_TRUE(from1.is_ok()) << from1.status().message();
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  for (int fd : fds) ::close(fd);
}

TEST_P(TransportTest, Ipv6Loopback) {
  if (!is_tcp()) GTEST_SKIP() << "addresses are tcp's";
  int probe = socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_addr = in6addr_loopback;
  bool have_v6 = probe >= 0 && bind(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  if (probe >= 0) ::close(probe);
  if (!have_v6) GTEST_SKIP() << "::1 is not available here";
  oa_.listen_host = ob_.listen_host = "::1";
  join();
  EXPECT_EQ(link_.ca->peer_address().rfind("[::1]:", 0), 0u) << link_.ca->peer_address();
  transfer({0, 5, 123457});
}

TEST_P(TransportTest, ConnectRetriesUntilThePeerListens) {
  if (!is_tcp()) GTEST_SKIP() << "ports are tcp's";
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  getsockname(probe, reinterpret_cast<sockaddr*>(&sa), &len);
  uint16_t port = ntohs(sa.sin_port);
  ::close(probe);
  oa_.env.port_lo = oa_.env.port_hi = port;
  auto a = create_transport(GetParam(), oa_);
  auto b = create_transport(GetParam(), ob_);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  std::string addr = "127.0.0.1:" + std::to_string(port);
  Result<std::unique_ptr<Connection>> connected = Status(ErrorCode::internal, "not run");
  std::thread connector([&] { connected = b.value()->connect(addr, PeerIdentity{7, 1, 0}, Deadline::after(20s)); });
  std::this_thread::sleep_for(300ms);
  auto listened = a.value()->listen();
  ASSERT_TRUE(listened.is_ok()) << listened.status().message();
  EXPECT_EQ(listened.value(), addr);
  auto got = a.value()->accept(PeerIdentity{7, 0, 1}, Deadline::after(20s));
  connector.join();
  ASSERT_TRUE(connected.is_ok()) << connected.status().message();
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  // Nobody there at all: the error names the address, within the deadline.
  auto start = std::chrono::steady_clock::now();
  auto nobody = b.value()->connect("127.0.0.1:1", PeerIdentity{7, 1, 0}, Deadline::after(500ms));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_FALSE(nobody.is_ok());
  EXPECT_NE(nobody.status().message().find("127.0.0.1:1"), std::string::npos) << nobody.status().message();
}

TEST_P(TransportTest, AnotherThreadTakesOverWhenNothingIsInFlight) {
  join();
  transfer({10, 100000});
  link_.done_a.clear(), link_.done_b.clear();
  std::vector<unsigned char> in(8);
  std::atomic<int> phase{0};
  std::thread other([&] {  // "one thread at a time": a handoff
    transfer({7, 3});
    ASSERT_TRUE(link_.ca->post_recv(in.data(), in.size(), 1).is_ok());  // left in flight
    ASSERT_TRUE(link_.a->poll(link_.done_a, std::chrono::microseconds(0)).is_ok());
    phase = 1;
    while (phase != 2) std::this_thread::yield();
    link_.ca->close();  // the owner can still drain and close
  });
  while (phase != 1) std::this_thread::yield();
  // A SINGLE_ISSUER ring with a receive in flight cannot change hands. (A peer on our only CPU:
  // the receive is not on the ring but waits in recv(), shared_cpu_path.h, so the ring may go.)
  auto* ca = dynamic_cast<tcp::TcpConnection*>(link_.ca.get());
  if (GetParam() == "tcp" && !ca->peer_shares_cpu()) {
    Status from_main = link_.a->poll(link_.done_a, std::chrono::microseconds(0));
    EXPECT_EQ(from_main.code(), ErrorCode::internal) << from_main.message();
    EXPECT_NE(from_main.message().find("in flight"), std::string::npos) << from_main.message();
  }
  phase = 2;
  other.join();
}

TEST_P(TransportTest, ZeroCopySendsCompleteAfterTheirNotification) {
  if (GetParam() != "tcp") GTEST_SKIP() << "SEND_ZC is the io_uring engine's";
  oa_.env.zcopy_bytes = ob_.env.zcopy_bytes = 64 << 10;
  join();
  ASSERT_TRUE(link_.b->capabilities().zero_copy_send);
  if (dynamic_cast<tcp::TcpConnection*>(link_.cb.get())->peer_shares_cpu()) {
    // Known from the handshake: the ends share our only CPU, and the shared-CPU path sends with
    // plain blocking calls (shared_cpu_path.h).
    GTEST_SKIP() << "both ends run on one CPU: no zero-copy sends";
  }
  transfer({(4u << 20) + 1, 100, 1u << 20, 64u << 10, (64u << 10) - 1});
  auto* tcp = dynamic_cast<tcp::TcpTransport*>(link_.b.get());
  ASSERT_NE(tcp, nullptr);
  tcp::EngineStats st = tcp->engine_stats();
  // Every zero-copy send was notified before its completion was reported (transfer() saw them
  // all complete), and on loopback the kernel says it copied.
  EXPECT_GE(st.zero_copy_sends, 3u);
  EXPECT_EQ(st.zero_copy_copied, st.zero_copy_sends);
  // Once the kernel has said "copied" often enough, the socket stops asking for zero-copy.
  link_.done_a.clear(), link_.done_b.clear();
  transfer(std::vector<size_t>(40, 128u << 10));
  EXPECT_LT(tcp->engine_stats().zero_copy_sends, st.zero_copy_sends + 40);
}

// Many zero-copy frames in flight, each followed by small ones: the frames' headers must not be
// reused while the kernel may still read a zero-copy send (it was: "not a braid frame").
TEST_P(TransportTest, ZeroCopyFramesStayIntactWithManyInFlight) {
  if (GetParam() != "tcp") GTEST_SKIP() << "SEND_ZC is the io_uring engine's";
  oa_.env.zcopy_bytes = ob_.env.zcopy_bytes = 64 << 10;
  join();
  for (int round = 0; round < 4; ++round) {
    link_.done_a.clear(), link_.done_b.clear();
    std::vector<size_t> sizes;
    for (int i = 0; i < 8; ++i) sizes.insert(sizes.end(), {1u << 20, 7, (1u << 20) + 5, 33});
    transfer(sizes);
  }
}

size_t open_fds() {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += e.is_symlink() ? 1 : 0;
  return n;
}

TEST_P(TransportTest, NoDescriptorOutlivesItsTransport) {
  size_t before = open_fds();
  {
    Link link;
    ASSERT_TRUE(make_link(GetParam(), oa_, ob_, link).is_ok());
    std::vector<unsigned char> in(16), out(16);
    ASSERT_TRUE(link.ca->post_recv(in.data(), in.size(), 1).is_ok());
    ASSERT_TRUE(link.cb->post_send(out.data(), out.size(), 1).is_ok());
    ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 1 && link.done_b.size() == 1; }, 10s));
    ASSERT_TRUE(link.ca->post_recv(in.data(), in.size(), 2).is_ok());  // left pending: close aborts it
    ASSERT_TRUE(link.a->poll(link.done_a, std::chrono::microseconds(0)).is_ok());
    link.ca.reset();
    link.cb.reset();
  }
  EXPECT_EQ(open_fds(), before);
}

std::vector<std::string> transports() {
  std::vector<std::string> v = {"tcp", "tcp-poll", "shm"};
#if BRAID_HAVE_INPROC
  v.push_back("inproc");
#endif
  return v;
}

INSTANTIATE_TEST_SUITE_P(Engines, TransportTest, ::testing::ValuesIn(transports()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace braid::transport::testing
