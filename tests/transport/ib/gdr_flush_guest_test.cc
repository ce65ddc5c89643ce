// The GPUDirect flush's mechanism on real verbs, in the Soft-RoCE guest. Soft-RoCE refuses
// dma-buf, so no receive is ever GPU memory here; the test switch (gdr_flush.h) flushes host
// receives instead: each rendezvous receive must be followed by one loopback RDMA READ that
// completes and brings back the message's last bytes, and the data must arrive intact. With a
// corrupted rkey the READ fails, and so must the receive: a flush that is skipped or reads the
// wrong region fails this test. Outside the guest it skips.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "tests/transport/ib/soft_roce_guest.h"
#include "transport/ib/gdr_flusher.h"
#include "transport/registry.h"

namespace braid::transport::ib {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr auto kBound = std::chrono::seconds(120);

// Rank 0 on rxe0, rank 1 on rxe1, connected through the seam; the flush mode is the one in
// force when the transports were made.
struct Pair {
  std::unique_ptr<Transport> t0, t1;
  std::unique_ptr<Connection> c0, c1;

  explicit Pair(FlushTestMode mode) {
    set_flush_test_mode(mode);
    auto make = [](const char* host) {
      TransportOptions o;
      o.listen_host = host;
      o.env.timeout_s = 60;  // the flush's bound
      return create_transport("ib", o);
    };
    auto a = make("10.99.0.1"), b = make("10.99.0.2");
    set_flush_test_mode(FlushTestMode::off);
    if (!a.is_ok() || !b.is_ok()) {
      ADD_FAILURE() << (a.is_ok() ? b.status().message() : a.status().message());
      return;
    }
    t0 = std::move(a).value();
    t1 = std::move(b).value();
    auto addr = t1->listen();
    if (!addr.is_ok() || !t0->listen().is_ok()) return;
    Result<std::unique_ptr<Connection>> accepted = Status(ErrorCode::internal, "not run");
    std::thread acceptor([&] { accepted = t1->accept(PeerIdentity{0x6d6d, 1, 0}, Deadline::after(kBound)); });
    auto connected = t0->connect(addr.value(), PeerIdentity{0x6d6d, 0, 1}, Deadline::after(kBound));
    acceptor.join();
    if (connected.is_ok() && accepted.is_ok()) {
      c0 = std::move(connected).value();
      c1 = std::move(accepted).value();
    } else {
      ADD_FAILURE() << connected.status().message() << " / " << accepted.status().message();
    }
  }
  bool ok() const { return c0 && c1; }

  std::vector<Completion> drive(size_t want) {
    std::vector<Completion> got;
    const Deadline deadline = Deadline::after(kBound);
    while (got.size() < want && !deadline.expired()) {
      EXPECT_TRUE(t0->poll(got, std::chrono::microseconds(0)).is_ok());
      EXPECT_TRUE(t1->poll(got, std::chrono::microseconds(200)).is_ok());
    }
    return got;
  }
};

Bytes pattern(size_t n, uint64_t seed) {
  Bytes b(n);
  std::mt19937_64 rng(seed);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// One message from `from` to `to`; returns the receive's completion.
Completion exchange(Pair& p, Connection& from, Connection& to, const Bytes& msg, Bytes& into) {
  EXPECT_TRUE(to.post_recv(into.data(), msg.size(), 1).is_ok());
  EXPECT_TRUE(from.post_send(msg.data(), msg.size(), 2).is_ok());
  std::vector<Completion> got = p.drive(2);
  EXPECT_EQ(got.size(), 2u);
  for (const Completion& c : got) {
    if (!c.is_send) return c;
  }
  return Completion{nullptr, 0, false, 0, Status(ErrorCode::internal, "no receive completion")};
}

TEST(GdrFlushGuest, EveryRendezvousReceiveIsFlushedAndDeliveredIntact) {
  SKIP_OUTSIDE_GUEST();
  Pair p(FlushTestMode::host_memory);
  ASSERT_TRUE(p.ok());
  // Eager sizes (up to 8192 bytes: copied out of a host slot, no flush) and rendezvous sizes
  // (written by the NIC into the receive: one flush each), both ways.
  const size_t sizes[] = {0, 1, 100, 8192, 8193, 65537, (size_t{1} << 20) + 3, size_t{4} << 20};
  for (int dir = 0; dir < 2; ++dir) {
    for (size_t n : sizes) {
      SCOPED_TRACE(::testing::Message() << n << " bytes, direction " << dir);
      const Bytes msg = pattern(n, n * 2 + static_cast<size_t>(dir));
      Bytes into(n + 1, 0xee);
      const FlushStats before = gdr_flush_stats();
      const Completion c = dir == 0 ? exchange(p, *p.c0, *p.c1, msg, into) : exchange(p, *p.c1, *p.c0, msg, into);
      const FlushStats after = gdr_flush_stats();
      ASSERT_TRUE(c.status.is_ok()) << c.status.message();
      EXPECT_EQ(c.bytes, n);
      EXPECT_TRUE(std::equal(msg.begin(), msg.end(), into.begin())) << "the data arrived damaged";
      EXPECT_EQ(into[n], 0xee) << "the receive was overrun";
      const uint64_t want = n > 8192 ? 1 : 0;
      EXPECT_EQ(after.posted - before.posted, want) << "flush READs posted";
      EXPECT_EQ(after.completed - before.completed, want) << "flush READs completed";
      EXPECT_EQ(after.failed, before.failed);
      if (want == 1) {
        // The READ brought back the message's own last bytes: it read this receive's region.
        ASSERT_EQ(after.last_bytes, GdrFlusher::kReadBytes);
        EXPECT_EQ(std::memcmp(after.last, msg.data() + n - GdrFlusher::kReadBytes, GdrFlusher::kReadBytes), 0);
      }
    }
  }
}

// The library's own behaviour on host memory: no flusher, no READ.
TEST(GdrFlushGuest, HostMemoryIsNotFlushedWithoutTheTestSwitch) {
  SKIP_OUTSIDE_GUEST();
  Pair p(FlushTestMode::off);
  ASSERT_TRUE(p.ok());
  const Bytes msg = pattern(size_t{1} << 20, 5);
  Bytes into(msg.size());
  const FlushStats before = gdr_flush_stats();
  const Completion c = exchange(p, *p.c0, *p.c1, msg, into);
  ASSERT_TRUE(c.status.is_ok()) << c.status.message();
  EXPECT_EQ(into, msg);
  EXPECT_EQ(gdr_flush_stats().posted, before.posted);
}

// A flush through a wrong rkey is refused by the NIC: the receive fails, naming the flush, the
// device and the verbs status, and nothing is reported as delivered.
TEST(GdrFlushGuest, AFlushWithAWrongRkeyFailsTheReceive) {
  SKIP_OUTSIDE_GUEST();
  Pair p(FlushTestMode::wrong_rkey);
  ASSERT_TRUE(p.ok());
  const Bytes small = pattern(100, 6);
  Bytes into_small(100);
  const Completion eager = exchange(p, *p.c0, *p.c1, small, into_small);
  EXPECT_TRUE(eager.status.is_ok()) << "an eager message needs no flush: " << eager.status.message();
  const FlushStats before = gdr_flush_stats();
  const Bytes msg = pattern(65536, 7);
  Bytes into(msg.size());
  const Completion c = exchange(p, *p.c0, *p.c1, msg, into);
  ASSERT_FALSE(c.status.is_ok()) << "a flush through a wrong rkey went unnoticed";
  const std::string& m = c.status.message();
  EXPECT_NE(m.find("ib receive on rank 1 from rank 0"), std::string::npos) << m;
  EXPECT_NE(m.find("the GPUDirect flush (an RDMA READ on rxe1 port 1"), std::string::npos) << m;
  EXPECT_NE(m.find("failed: remote access error (verbs status"), std::string::npos) << m;
  EXPECT_EQ(c.bytes, 0u);
  EXPECT_EQ(gdr_flush_stats().failed, before.failed + 1);
}

}  // namespace
}  // namespace braid::transport::ib
