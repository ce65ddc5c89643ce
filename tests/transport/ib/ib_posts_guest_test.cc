// What the ib transport posts per small message, on real verbs in the Soft-RoCE guest
// (elsewhere it skips): two transports of one process on rxe0 and rxe1, counted through
// IbTransport::post_stats(). On Soft-RoCE each doorbell (ibv_post_send call) is a system call
// that runs the whole packet path, so these counts are the transport's cost per message there.
// - An 8-byte ping-pong rings one doorbell per message: no clear-to-send is written for a
//   message that comes eagerly, also when the receive has room for far more (the runtime's
//   first receive of an operation has room for a header and 64 KiB).
// - A large message into a receive whose CTS is held back asks for it (a request to send):
//   it is not left to wait for the hold's bound.
// - A pass that writes several work requests rings one doorbell for them (write_batch.h).
// - A receive is registered only when its CTS is written: in that 8-byte ping-pong the
//   registration cache is asked at most once per CTS, not once per receive.
// - A connection where nothing arrived or was posted since its last pass skips the next one,
//   yet a CTS held back still goes at the hold's bound while the transport only polls.
// - Receive work requests consumed by the peer's writes are posted again (in chains): far more
//   messages than a QP's receive queue holds keep landing.
// - poll() appends to what its vector already holds.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/transport/ib/soft_roce_guest.h"
#include "tests/transport/ib/guest_pair.h"
#include "transport/ib/ib_connection.h"
#include "transport/ib/ib_transport.h"
#include "transport/registry.h"

namespace braid::transport::ib {
namespace {

constexpr uint64_t kComm = 0x5b0d;
constexpr auto kBound = std::chrono::seconds(60);
constexpr size_t kRoomy = 64 * 1024 + 64;  // as the runtime's first receive of an operation

struct End {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Connection> conn;
  std::vector<unsigned char> in = std::vector<unsigned char>(kRoomy), out = std::vector<unsigned char>(kRoomy);

  IbTransport& ib() { return dynamic_cast<IbTransport&>(*transport); }
  ::testing::AssertionResult await(int n) { return guest::await_completions(*transport, n, kBound); }
};

bool connect(End& e0, End& e1) {
  guest::Pair p;
  if (!guest::connect_pair(&p, kComm, kBound)) return false;
  e0.transport = std::move(p.t0);
  e1.transport = std::move(p.t1);
  e0.conn = std::move(p.c0);
  e1.conn = std::move(p.c1);
  return true;
}

// `rounds` round trips of `bytes`, every receive posted with room for `capacity`: e0 pings,
// e1 echoes on its own thread.
void ping_pong(End& e0, End& e1, int rounds, size_t bytes, size_t capacity) {
  std::thread echo([&] {
    for (int i = 0; i < rounds; ++i) {
      ASSERT_TRUE(e1.conn->post_recv(e1.in.data(), capacity, 0).is_ok());
      ASSERT_TRUE(e1.await(1));
      ASSERT_TRUE(e1.conn->post_send(e1.in.data(), bytes, 1).is_ok());
      ASSERT_TRUE(e1.await(1));
    }
  });
  for (int i = 0; i < rounds; ++i) {
    e0.out[0] = static_cast<unsigned char>(i);
    ASSERT_TRUE(e0.conn->post_recv(e0.in.data(), capacity, 0).is_ok());
    ASSERT_TRUE(e0.conn->post_send(e0.out.data(), bytes, 1).is_ok());
    ASSERT_TRUE(e0.await(2));
    ASSERT_EQ(e0.in[0], e0.out[0]);
  }
  echo.join();
}

IbPostStats both(End& e0, End& e1) {
  const IbPostStats a = e0.ib().post_stats(), b = e1.ib().post_stats();
  return IbPostStats{a.doorbells + b.doorbells,         a.work_requests + b.work_requests,
                     a.messages + b.messages,           a.cts_written + b.cts_written,
                     a.cts_overdue + b.cts_overdue,     a.cts_requests + b.cts_requests};
}

TEST(IbPostsGuest, ASmallPingPongRingsOneDoorbellPerMessage) {
  SKIP_OUTSIDE_GUEST();
  for (size_t capacity : {size_t{8}, kRoomy}) {
    SCOPED_TRACE(::testing::Message() << "receives of " << capacity << " bytes");
    End e0, e1;
    ASSERT_TRUE(connect(e0, e1));
    ping_pong(e0, e1, 20, 8, capacity);  // warm-up: the receiver learns that these come eagerly
    if (HasFatalFailure()) return;
    const IbPostStats before = both(e0, e1);
    constexpr int kRounds = 300;
    ping_pong(e0, e1, kRounds, 8, capacity);
    if (HasFatalFailure()) return;
    const IbPostStats after = both(e0, e1);
    const uint64_t messages = after.messages - before.messages;
    const uint64_t doorbells = after.doorbells - before.doorbells;
    const uint64_t cts = after.cts_written - before.cts_written;
    const uint64_t overdue = after.cts_overdue - before.cts_overdue;
    EXPECT_EQ(messages, 2u * kRounds);
    // A CTS per message (two doorbells per message) was the cost before CTS entries were held
    // back for roomy receives. What remains: credit reports (one CTS per half eager ring
    // consumed, and a request to send when one came too late), and CTS entries released by the
    // hold's 1 ms bound (CtsHold::kTimeout) whenever the emulated machine stalls that long. How
    // many of those there are depends on how loaded the host is, not on braid, so only the CTS
    // written for any other reason are counted: a CTS per message written at once, the cost
    // this guards against, would be all of them.
    EXPECT_LE((cts - overdue) * 8, messages) << cts << " CTS written for " << messages << " messages, " << overdue
                                             << " of them at the hold's bound";
    EXPECT_LE((doorbells - overdue) * 10, messages * 12)
        << doorbells << " doorbells for " << messages << " messages, " << overdue << " CTS at the hold's bound";
    EXPECT_GE(after.work_requests - before.work_requests, doorbells);  // a CTS may share a send's
  }
}

uint64_t lookups(End& e) {
  const RegCache::Stats s = e.ib().registration_stats();
  return s.hits + s.misses;
}

TEST(IbPostsGuest, ASmallPingPongRegistersOnlyWhatACtsAdvertises) {
  SKIP_OUTSIDE_GUEST();
  for (size_t capacity : {size_t{8}, kRoomy}) {
    SCOPED_TRACE(::testing::Message() << "receives of " << capacity << " bytes");
    End e0, e1;
    ASSERT_TRUE(connect(e0, e1));
    ping_pong(e0, e1, 20, 8, capacity);
    if (HasFatalFailure()) return;
    const IbPostStats before = both(e0, e1);
    const uint64_t asked_before = lookups(e0) + lookups(e1);
    constexpr int kRounds = 200;
    ping_pong(e0, e1, kRounds, 8, capacity);
    if (HasFatalFailure()) return;
    const uint64_t asked = lookups(e0) + lookups(e1) - asked_before;
    const uint64_t cts = both(e0, e1).cts_written - before.cts_written;
    // Registering every receive at post_recv asked the cache 2 * kRounds times (one hit per
    // receive); the eager messages' receives hand no address to the peer. Only a receive whose
    // CTS is written (credit reports, mostly) is registered, and the sends here are inline.
    EXPECT_LE(asked, cts) << asked << " registration lookups for " << 2 * kRounds << " receives and " << cts
                          << " CTS written";
  }
}

TEST(IbPostsGuest, ALargeMessageIntoAHeldReceiveAsksForItsCts) {
  SKIP_OUTSIDE_GUEST();
  End e0, e1;
  ASSERT_TRUE(connect(e0, e1));
  // The hold's bound, 1 ms by default, is reached whenever the emulated machine stalls that
  // long, which a loaded host makes common. 5 s is far above a request's round trip however
  // slow the guest, so a CTS that goes at the bound here means the request was not heard.
  dynamic_cast<IbConnection&>(*e1.conn).set_cts_hold_bound(std::chrono::seconds(5));
  ping_pong(e0, e1, 10, 8, kRoomy);  // roomy receives now expect eager messages
  if (HasFatalFailure()) return;
  // Each time: e1 posts a roomy receive (its CTS held back), e0 sends 20000 bytes, which need
  // the CTS. e1 polls without sleeping, so only e0's request or the hold's bound can release
  // it; a small message follows to make roomy receives look eager again.
  constexpr int kTimes = 20;
  const IbPostStats before0 = e0.ib().post_stats(), before1 = e1.ib().post_stats();
  for (int i = 0; i < kTimes; ++i) {
    std::memset(e0.out.data(), i + 1, 20000);
    ASSERT_TRUE(e1.conn->post_recv(e1.in.data(), kRoomy, 0).is_ok());
    std::vector<Completion> got;
    ASSERT_TRUE(e1.transport->poll(got, std::chrono::microseconds(0)).is_ok());
    ASSERT_TRUE(e0.conn->post_send(e0.out.data(), 20000, 1).is_ok());
    std::thread sender([&] { EXPECT_TRUE(e0.await(1)); });
    EXPECT_TRUE(e1.await(1));
    sender.join();
    ASSERT_EQ(e1.in[0], i + 1);
    ASSERT_EQ(e1.in[19999], i + 1);
    ping_pong(e0, e1, 1, 8, kRoomy);
    if (HasFatalFailure()) return;
  }
  const IbPostStats after0 = e0.ib().post_stats(), after1 = e1.ib().post_stats();
  EXPECT_GE(after0.cts_requests - before0.cts_requests, uint64_t{kTimes});
  // Released by the request, not by the bound: were the request ignored, every one would go at
  // the bound, 5 s late.
  EXPECT_EQ(after1.cts_overdue - before1.cts_overdue, 0u)
      << after1.cts_overdue - before1.cts_overdue << " of " << kTimes << " CTS went only at the hold's bound";
}

TEST(IbPostsGuest, APassRingsOneDoorbellForAllItsWrites) {
  SKIP_OUTSIDE_GUEST();
  End e0, e1;
  ASSERT_TRUE(connect(e0, e1));
  // Small receives are advertised in the transport's next pass, all but the newest (held back):
  // one pass, 15 CTS entries, one chain of work requests on the connection's one QP.
  constexpr int kReceives = 16;
  std::vector<std::vector<unsigned char>> bufs(kReceives, std::vector<unsigned char>(8));
  for (int i = 0; i < kReceives; ++i) ASSERT_TRUE(e1.conn->post_recv(bufs[i].data(), 8, i).is_ok());
  const IbPostStats before = e1.ib().post_stats();
  std::vector<Completion> got;
  ASSERT_TRUE(e1.transport->poll(got, std::chrono::microseconds(0)).is_ok());
  const IbPostStats after = e1.ib().post_stats();
  EXPECT_EQ(after.cts_written - before.cts_written, uint64_t{kReceives - 1});
  EXPECT_EQ(after.work_requests - before.work_requests, uint64_t{kReceives - 1});
  EXPECT_EQ(after.doorbells - before.doorbells, 1u);
  // And the messages still land where their receives said, in order.
  for (int i = 0; i < kReceives; ++i) {
    e0.out[static_cast<size_t>(i)] = static_cast<unsigned char>(100 + i);
    ASSERT_TRUE(e0.conn->post_send(e0.out.data() + i, 1, i).is_ok());
  }
  std::thread sender([&] { EXPECT_TRUE(e0.await(kReceives)); });
  EXPECT_TRUE(e1.await(kReceives - static_cast<int>(got.size())));
  sender.join();
  for (int i = 0; i < kReceives; ++i) EXPECT_EQ(bufs[i][0], 100 + i) << "receive " << i;
}

TEST(IbPostsGuest, ASettledConnectionSkipsItsPasses) {
  SKIP_OUTSIDE_GUEST();
  End e0, e1;
  ASSERT_TRUE(connect(e0, e1));
  ping_pong(e0, e1, 10, 8, 8);
  if (HasFatalFailure()) return;
  // Nothing outstanding, nothing arriving: polling looks at the ledgers once more at most.
  const IbPostStats before = e0.ib().post_stats();
  std::vector<Completion> got;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(e0.transport->poll(got, std::chrono::microseconds(0)).is_ok());
  EXPECT_LE(e0.ib().post_stats().passes - before.passes, 1u);
  EXPECT_TRUE(got.empty());
  // A message posted now still goes, and its answer comes back.
  ping_pong(e0, e1, 3, 8, 8);
}

TEST(IbPostsGuest, AHeldCtsGoesAtTheBoundWhileTheTransportOnlyPolls) {
  SKIP_OUTSIDE_GUEST();
  End e0, e1;
  ASSERT_TRUE(connect(e0, e1));
  auto& c1 = dynamic_cast<IbConnection&>(*e1.conn);
  c1.set_cts_hold_bound(std::chrono::milliseconds(30));
  // A small receive, the newest: its CTS is held back. Polled without a timeout, e1's passes
  // find nothing new after the first, and still the CTS must go once it has waited the bound.
  ASSERT_TRUE(e1.conn->post_recv(e1.in.data(), 8, 0).is_ok());
  const IbPostStats before = e1.ib().post_stats();
  std::vector<Completion> got;
  const auto start = Clock::now();
  while (e1.ib().post_stats().cts_written == before.cts_written && Clock::now() - start < std::chrono::seconds(20)) {
    ASSERT_TRUE(e1.transport->poll(got, std::chrono::microseconds(0)).is_ok());
  }
  const auto waited = Clock::now() - start;
  const IbPostStats after = e1.ib().post_stats();
  EXPECT_EQ(after.cts_written - before.cts_written, 1u);
  EXPECT_EQ(after.cts_overdue - before.cts_overdue, 1u);
  EXPECT_GE(waited, std::chrono::milliseconds(25));
  EXPECT_LT(waited, std::chrono::seconds(20));
  // The message still lands in that receive.
  e0.out[0] = 77;
  ASSERT_TRUE(e0.conn->post_send(e0.out.data(), 8, 1).is_ok());
  std::thread sender([&] { EXPECT_TRUE(e0.await(1)); });
  EXPECT_TRUE(e1.await(1));
  sender.join();
  EXPECT_EQ(e1.in[0], 77);
}

TEST(IbPostsGuest, MoreMessagesThanTheReceiveQueueHoldsKeepLanding) {
  SKIP_OUTSIDE_GUEST();
  End e0, e1;
  ASSERT_TRUE(connect(e0, e1));
  // Each end receives 1.5 times IbConnection::kRecvDepth messages (each consumes a receive
  // work request); a receive queue not refilled would run dry and fail the connection.
  constexpr int kRounds = IbConnection::kRecvDepth * 3 / 2;
  ping_pong(e0, e1, kRounds, 8, 8);
  if (HasFatalFailure()) return;
  EXPECT_EQ(e0.ib().post_stats().messages, uint64_t{kRounds});
  EXPECT_EQ(e1.ib().post_stats().messages, uint64_t{kRounds});
}

TEST(IbPostsGuest, PollAppendsToWhatItsVectorHolds) {
  SKIP_OUTSIDE_GUEST();
  End e0, e1;
  ASSERT_TRUE(connect(e0, e1));
  ASSERT_TRUE(e1.conn->post_recv(e1.in.data(), 8, 7).is_ok());
  ASSERT_TRUE(e0.conn->post_send(e0.out.data(), 8, 1).is_ok());
  std::vector<Completion> got;
  got.push_back(Completion{nullptr, 12345, true, 3, Status::ok()});
  const auto start = Clock::now();
  while (got.size() < 2 && Clock::now() - start < std::chrono::seconds(20)) {
    ASSERT_TRUE(e1.transport->poll(got, std::chrono::milliseconds(10)).is_ok());
    std::vector<Completion> sent;
    ASSERT_TRUE(e0.transport->poll(sent, std::chrono::microseconds(0)).is_ok());
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].cookie, 12345u);
  EXPECT_EQ(got[0].bytes, 3u);
  EXPECT_EQ(got[1].cookie, 7u);
  EXPECT_EQ(got[1].bytes, 8u);
  EXPECT_FALSE(got[1].is_send);
}

}  // namespace
}  // namespace braid::transport::ib
