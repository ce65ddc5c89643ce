// The ib transport on real verbs, in the Soft-RoCE guest (scripts/rdma_guest.sh): two transports
// in one process, one on rxe0 (10.99.0.1) and one on rxe1 (10.99.0.2), connected through the
// seam as two ranks would be. Sizes from 0 B to 64 MiB both ways, order, many messages in
// flight, 1 and 4 QPs per connection, a message larger than its receive, a peer that goes away
// mid-receive, a low locked-memory limit, a bad BRAID_IB_HCA and a GID index out of range.
// Outside the guest it skips.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "tests/transport/ib/soft_roce_guest.h"
#include "transport/ib/ib_devices.h"
#include "transport/ib/ib_transport.h"
#include "transport/registry.h"

namespace braid::transport::ib {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr uint64_t kComm = 0x1b1b;
constexpr auto kBound = std::chrono::seconds(120);  // no exchange here may take near this long


TransportOptions options(const char* host, int qps = 1) {
  TransportOptions o;
  o.listen_host = host;
  o.env.ib_qps_per_connection = qps;
  return o;
}

// Two transports and a connection between them: rank 0 on rxe0, rank 1 on rxe1.
struct Link {
  std::unique_ptr<Transport> t0, t1;
  std::unique_ptr<Connection> c0, c1;  // rank 0's end, rank 1's end

  static Link make(int qps) {
    Link l;
    auto t0 = create_transport("ib", options("10.99.0.1", qps));
    auto t1 = create_transport("ib", options("10.99.0.2", qps));
    EXPECT_TRUE(t0.is_ok()) << t0.status().message();
    EXPECT_TRUE(t1.is_ok()) << t1.status().message();
    if (!t0.is_ok() || !t1.is_ok()) return l;
    l.t0 = std::move(t0).value();
    l.t1 = std::move(t1).value();
    auto addr1 = l.t1->listen();
    EXPECT_TRUE(addr1.is_ok() && l.t0->listen().is_ok());
    // connect() waits for the acceptor's answer: accept on another thread.
    Result<std::unique_ptr<Connection>> accepted = Status(ErrorCode::internal, "not run");
    std::thread acceptor([&] { accepted = l.t1->accept(PeerIdentity{kComm, 1, 0}, Deadline::after(kBound)); });
    auto connected = l.t0->connect(addr1.value(), PeerIdentity{kComm, 0, 1}, Deadline::after(kBound));
    acceptor.join();
    EXPECT_TRUE(connected.is_ok()) << connected.status().message();
    EXPECT_TRUE(accepted.is_ok()) << accepted.status().message();
    if (connected.is_ok()) l.c0 = std::move(connected).value();
    if (accepted.is_ok()) l.c1 = std::move(accepted).value();
    return l;
  }
  bool ok() const { return c0 && c1; }
};

// Polls both transports until `want` completions arrived in all (or the bound passed; want 0:
// for the whole bound).
std::vector<Completion> drive(Link& l, size_t want, std::chrono::seconds bound = kBound) {
  std::vector<Completion> got;
  const Deadline deadline = Deadline::after(bound);
  while ((want == 0 || got.size() < want) && !deadline.expired()) {
    if (l.t0) {
      EXPECT_TRUE(l.t0->poll(got, std::chrono::microseconds(0)).is_ok());
    }
    if (l.t1) {
      EXPECT_TRUE(l.t1->poll(got, std::chrono::microseconds(200)).is_ok());
    }
  }
  return got;
}

Bytes pattern(size_t n, uint64_t seed) {
  Bytes b(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(b.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return b;
}

class IbTransportGuest : public ::testing::TestWithParam<int> {};

TEST_P(IbTransportGuest, EverySizeBothWays) {
  SKIP_OUTSIDE_GUEST();
  Link l = Link::make(GetParam());
  ASSERT_TRUE(l.ok());
  const size_t sizes[] = {0, 1, 7, 4096, 8192, 8193, 65536, 65537, size_t{1} << 20, (size_t{4} << 20) + 3,
                          size_t{64} << 20};
  for (size_t n : sizes) {
    SCOPED_TRACE(::testing::Message() << n << " bytes");
    const Bytes a = pattern(n, n), b = pattern(n, n + 1);
    Bytes into1(n + 1, 0xee), into0(n + 1, 0xee);
    ASSERT_TRUE(l.c1->post_recv(into1.data(), n, 1).is_ok());
    ASSERT_TRUE(l.c0->post_recv(into0.data(), n, 2).is_ok());
    ASSERT_TRUE(l.c0->post_send(a.data(), n, 3).is_ok());
    ASSERT_TRUE(l.c1->post_send(b.data(), n, 4).is_ok());
    auto got = drive(l, 4);
    ASSERT_EQ(got.size(), 4u);
    for (const Completion& c : got) {
      EXPECT_TRUE(c.status.is_ok()) << c.status.message();
      EXPECT_EQ(c.bytes, n);
    }
    EXPECT_TRUE(std::equal(a.begin(), a.end(), into1.begin()));
    EXPECT_TRUE(std::equal(b.begin(), b.end(), into0.begin()));
    EXPECT_EQ(into1[n], 0xee);
    EXPECT_EQ(into0[n], 0xee);
  }
}

// 256 messages in flight (the transport's max_in_flight), sizes mixed, receives posted after
// the sends for half of them (eager messages then wait in their slots): each receive gets its
// own message, and completions come in posting order.
TEST_P(IbTransportGuest, ManyInFlightKeepTheirOrder) {
  SKIP_OUTSIDE_GUEST();
  Link l = Link::make(GetParam());
  ASSERT_TRUE(l.ok());
  const size_t kCount = 256;
  std::vector<Bytes> msgs, into(kCount);
  for (size_t i = 0; i < kCount; ++i) msgs.push_back(pattern(i % 3 == 0 ? 100000 + i : i * 37 % 9000, i));
  for (size_t i = 0; i < kCount / 2; ++i) {
    into[i].assign(msgs[i].size(), 0);
    ASSERT_TRUE(l.c1->post_recv(into[i].data(), into[i].size(), i).is_ok());
  }
  for (size_t i = 0; i < kCount; ++i) ASSERT_TRUE(l.c0->post_send(msgs[i].data(), msgs[i].size(), 1000 + i).is_ok());
  auto got = drive(l, 0, std::chrono::seconds(1));  // let eager messages arrive before their receives
  for (size_t i = kCount / 2; i < kCount; ++i) {
    into[i].assign(msgs[i].size(), 0);
    ASSERT_TRUE(l.c1->post_recv(into[i].data(), into[i].size(), i).is_ok());
  }
  auto rest = drive(l, 2 * kCount - got.size());
  got.insert(got.end(), rest.begin(), rest.end());
  ASSERT_EQ(got.size(), 2 * kCount);
  uint64_t next_recv = 0, next_send = 1000;
  for (const Completion& c : got) {
    ASSERT_TRUE(c.status.is_ok()) << c.status.message();
    if (c.is_send) {
      EXPECT_EQ(c.cookie, next_send++);
    } else {
      EXPECT_EQ(c.cookie, next_recv++);
      EXPECT_EQ(c.bytes, msgs[c.cookie].size());
    }
  }
  for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(into[i], msgs[i]) << "message " << i;
  // Steady state, the buffers pinned (register_memory): the same buffers twice more cost no
  // registration per operation, every one is a hit on its pinned range. Unpinned, each operation
  // registers its own (memory_registry.h says why).
  auto* ib0 = dynamic_cast<IbTransport*>(l.t0.get());
  auto* ib1 = dynamic_cast<IbTransport*>(l.t1.get());
  ASSERT_TRUE(ib0 != nullptr && ib1 != nullptr);
  std::vector<MemoryRegion> pins0, pins1;
  for (size_t i = 0; i < kCount; ++i) {
    auto p0 = l.t0->register_memory(msgs[i].data(), msgs[i].size(), MemoryKind::host);
    auto p1 = l.t1->register_memory(into[i].data(), into[i].size(), MemoryKind::host);
    ASSERT_TRUE(p0.is_ok() && p1.is_ok());
    pins0.push_back(p0.value());
    pins1.push_back(p1.value());
  }
  const auto b0 = ib0->registration_stats(), b1 = ib1->registration_stats();
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_TRUE(l.c1->post_recv(into[i].data(), into[i].size(), i).is_ok());
      ASSERT_TRUE(l.c0->post_send(msgs[i].data(), msgs[i].size(), i).is_ok());
    }
    ASSERT_EQ(drive(l, 2 * kCount).size(), 2 * kCount);
  }
  const auto s0 = ib0->registration_stats(), s1 = ib1->registration_stats();
  std::printf("registrations of pinned buffers: sender %lu misses %lu hits, receiver %lu misses %lu hits, over %zu "
              "operations each\n",
              static_cast<unsigned long>(s0.misses - b0.misses), static_cast<unsigned long>(s0.hits - b0.hits),
              static_cast<unsigned long>(s1.misses - b1.misses), static_cast<unsigned long>(s1.hits - b1.hits),
              2 * kCount);
  EXPECT_EQ(s0.misses - b0.misses, 0u);
  EXPECT_EQ(s1.misses - b1.misses, 0u);
  EXPECT_EQ(s0.evictions + s1.evictions, 0u);
  EXPECT_GT(s1.hits - b1.hits, kCount);  // the receives: every advertised one hits its pin
  for (const MemoryRegion& r : pins0) l.t0->deregister_memory(r);
  for (const MemoryRegion& r : pins1) l.t1->deregister_memory(r);
}

INSTANTIATE_TEST_SUITE_P(Qps, IbTransportGuest, ::testing::Values(1, 4));

TEST(IbTransportGuestErrors, MessageLargerThanItsReceiveFailsThatReceiveOnly) {
  SKIP_OUTSIDE_GUEST();
  Link l = Link::make(1);
  ASSERT_TRUE(l.ok());
  for (size_t n : {size_t{100}, size_t{1} << 20}) {  // eager, then rendezvous
    const Bytes big = pattern(n, 1), small = pattern(10, 2);
    Bytes into(n / 2 + 1, 0xee), into2(10);
    ASSERT_TRUE(l.c1->post_recv(into.data(), n / 2, 1).is_ok());
    ASSERT_TRUE(l.c1->post_recv(into2.data(), 10, 2).is_ok());
    ASSERT_TRUE(l.c0->post_send(big.data(), n, 3).is_ok());
    ASSERT_TRUE(l.c0->post_send(small.data(), 10, 4).is_ok());
    auto got = drive(l, 4);
    ASSERT_EQ(got.size(), 4u);
    for (const Completion& c : got) {
      if (c.cookie == 1) {
        EXPECT_EQ(c.status.code(), ErrorCode::protocol) << c.status.message();
        EXPECT_NE(c.status.message().find("larger than the " + std::to_string(n / 2) + "-byte receive"),
                  std::string::npos)
            << c.status.message();
      } else {
        EXPECT_TRUE(c.status.is_ok()) << c.status.message();
      }
    }
    EXPECT_EQ(into[n / 2], 0xee) << "the receive was overrun";
    EXPECT_EQ(into2, small);
  }
}

TEST(IbTransportGuestErrors, PeerGoneMidReceiveIsNamedWithinTheBound) {
  SKIP_OUTSIDE_GUEST();
  Link l = Link::make(1);
  ASSERT_TRUE(l.ok());
  const size_t n = size_t{64} << 20;
  Bytes data = pattern(n, 3), into(n);
  ASSERT_TRUE(l.c1->post_recv(into.data(), n, 1).is_ok());
  ASSERT_TRUE(l.c0->post_send(data.data(), n, 2).is_ok());
  drive(l, 0, std::chrono::seconds(1));  // the write is under way
  l.c0.reset();                           // rank 0 goes away (its socket closes, its QPs fail)
  const auto start = Clock::now();
  std::vector<Completion> got = drive(l, 1, std::chrono::seconds(30));
  ASSERT_EQ(got.size(), 1u) << "no error within 30 s";
  std::printf("peer loss reported after %.3f s\n", std::chrono::duration<double>(Clock::now() - start).count());
  const Completion& c = got[0];
  EXPECT_FALSE(c.is_send);
  EXPECT_EQ(c.status.code(), ErrorCode::peer_lost) << c.status.message();
  const std::string& m = c.status.message();
  EXPECT_NE(m.find("ib receive on rank 1 from rank 0 at "), std::string::npos) << m;
  EXPECT_NE(m.find("via rxe1 port 1"), std::string::npos) << m;
  EXPECT_NE(m.find("closed this connection normally"), std::string::npos) << m;
}

// A rank may finish its part, say goodbye and go before its peer has even asked for the last
// message it sent (a slow rank: rank 0 of a 3-rank all_reduce receiving the result of the
// fold). What was sent still arrives: receives posted after the goodbye take the messages
// waiting in the eager slots; only one beyond them fails, naming the goodbye and the counts.
TEST(IbTransportGuestErrors, MessagesSentBeforeAGoodbyeAreReceivedAfterIt) {
  SKIP_OUTSIDE_GUEST();
  Link l = Link::make(1);
  ASSERT_TRUE(l.ok());
  const Bytes m0 = pattern(8, 10), m1 = pattern(0, 11), m2 = pattern(4000, 12);
  ASSERT_TRUE(l.c0->post_send(m0.data(), m0.size(), 1).is_ok());
  ASSERT_TRUE(l.c0->post_send(m1.data(), m1.size(), 2).is_ok());
  ASSERT_TRUE(l.c0->post_send(m2.data(), m2.size(), 3).is_ok());
  std::vector<Completion> sent = drive(l, 3);
  ASSERT_EQ(sent.size(), 3u);
  for (const Completion& c : sent) EXPECT_TRUE(c.status.is_ok()) << c.status.message();
  l.c0->close();  // the goodbye
  EXPECT_TRUE(drive(l, 0, std::chrono::seconds(1)).empty()) << "nothing was outstanding on rank 1";
  Bytes into0(8), into1(1, 0xee), into2(4000), into3(8);
  ASSERT_TRUE(l.c1->post_recv(into0.data(), into0.size(), 10).is_ok());
  ASSERT_TRUE(l.c1->post_recv(into1.data(), 0, 11).is_ok());
  ASSERT_TRUE(l.c1->post_recv(into2.data(), into2.size(), 12).is_ok());
  ASSERT_TRUE(l.c1->post_recv(into3.data(), into3.size(), 13).is_ok());
  std::vector<Completion> got = drive(l, 4, std::chrono::seconds(30));
  ASSERT_EQ(got.size(), 4u);
  for (const Completion& c : got) {
    SCOPED_TRACE(c.cookie);
    if (c.cookie == 13) {
      EXPECT_EQ(c.status.code(), ErrorCode::peer_lost) << c.status.message();
      EXPECT_NE(c.status.message().find("closed this connection normally"), std::string::npos) << c.status.message();
      EXPECT_NE(c.status.message().find("it had sent 3 messages here"), std::string::npos) << c.status.message();
    } else {
      EXPECT_TRUE(c.status.is_ok()) << c.status.message();
    }
  }
  EXPECT_EQ(into0, m0);
  EXPECT_EQ(into1[0], 0xee);
  EXPECT_EQ(into2, m2);
}

// A peer that dies says no goodbye: its liveness socket just ends (here shut down under the
// connection, as the kernel does for a killed process). The receive fails naming that.
TEST(IbTransportGuestErrors, PeerDeathWithoutGoodbyeIsNamedWithinTheBound) {
  SKIP_OUTSIDE_GUEST();
  Link l = Link::make(1);
  ASSERT_TRUE(l.ok());
  Bytes into(1 << 20);
  ASSERT_TRUE(l.c1->post_recv(into.data(), into.size(), 1).is_ok());
  auto* c0 = dynamic_cast<IbConnection*>(l.c0.get());
  ASSERT_NE(c0, nullptr);
  ASSERT_EQ(::shutdown(c0->socket_fd(), SHUT_RDWR), 0);
  std::vector<Completion> got = drive(l, 1, std::chrono::seconds(30));
  ASSERT_EQ(got.size(), 1u) << "no error within 30 s";
  EXPECT_EQ(got[0].status.code(), ErrorCode::peer_lost) << got[0].status.message();
  EXPECT_NE(got[0].status.message().find("ended without a goodbye: rank 0 exited or was killed"), std::string::npos)
      << got[0].status.message();
}

TEST(IbTransportGuestErrors, BadHcaListsThePortsThatExist) {
  SKIP_OUTSIDE_GUEST();
  TransportOptions o = options("10.99.0.1");
  o.env.ib_hca = "=mlx5_0";
  auto t = create_transport("ib", o);
  ASSERT_FALSE(t.is_ok());
  const std::string& m = t.status().message();
  EXPECT_NE(m.find("BRAID_TRANSPORT=ib"), std::string::npos) << m;
  EXPECT_NE(m.find("rxe0"), std::string::npos) << m;
  EXPECT_NE(m.find("rxe1"), std::string::npos) << m;
  EXPECT_NE(m.find("BRAID_IB_HCA"), std::string::npos) << m;
}

TEST(IbTransportGuestErrors, GidIndexOutOfRangeIsNamed) {
  SKIP_OUTSIDE_GUEST();
  TransportOptions o = options("10.99.0.1");
  o.env.ib_gid_index = 200;
  auto t = create_transport("ib", o);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("BRAID_IB_GID_INDEX"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("200"), std::string::npos) << t.status().message();
}

// Under a low RLIMIT_MEMLOCK (root's CAP_IPC_LOCK, which ignores it, dropped in a child): the
// rings fit, a 16 MiB send buffer does not, and its send fails naming the limit and the fix.
void send_under_low_memlock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2] = {};
  if (syscall(SYS_capget, &header, caps) != 0) std::exit(3);
  caps[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  caps[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
  if (syscall(SYS_capset, &header, caps) != 0) std::exit(4);
  rlimit low{8 << 20, 8 << 20};
  if (setrlimit(RLIMIT_MEMLOCK, &low) != 0) std::exit(5);
  Link l = Link::make(1);
  if (!l.ok()) std::exit(6);
  const size_t n = size_t{16} << 20;
  Bytes data(n, 1), into(n);
  if (!l.c1->post_recv(into.data(), n, 1).is_ok() || !l.c0->post_send(data.data(), n, 2).is_ok()) std::exit(7);
  auto got = drive(l, 2, std::chrono::seconds(30));
  for (const Completion& c : got) {
    if (!c.status.is_ok()) std::fprintf(stderr, "%s\n", c.status.message().c_str());
  }
  std::exit(got.size() == 2 && !got[0].status.is_ok() ? 0 : 1);
}

TEST(IbTransportGuestErrors, LowMemlockFailsTheOperationNamingTheLimit) {
  SKIP_OUTSIDE_GUEST();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(send_under_low_memlock(), ::testing::ExitedWithCode(0),
              "ib .* rank .*RLIMIT_MEMLOCK.*ulimit -l unlimited");
}

}  // namespace
}  // namespace braid::transport::ib
