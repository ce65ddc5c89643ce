// How the ib transport waits, on real verbs in the Soft-RoCE guest (elsewhere it skips): two
// transports of one process, on rxe0 and rxe1, each polled by its own thread in an 8-byte
// ping-pong, and IbTransport::wait_stats() says whether a wait was spent polling the CQs or
// asleep on the completion channel. Counts, never durations: a wait for a completion that comes
// within the spin is caught by polling; a transport with nothing coming sleeps instead of
// spinning; and with BRAID_SPIN_US=0 the transport learns to spin from the waits it has seen
// (spin_budget.h).
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/transport/ib/soft_roce_guest.h"
#include "tests/transport/ib/guest_pair.h"
#include "transport/ib/ib_transport.h"
#include "transport/registry.h"

namespace braid::transport::ib {
namespace {

constexpr uint64_t kComm = 0x3a17;
constexpr auto kBound = std::chrono::seconds(60);

struct End {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Connection> conn;
  unsigned char in[8] = {}, out[8] = {};

  IbTransport& ib() { return dynamic_cast<IbTransport&>(*transport); }
  // Waits in poll (as the runtime does: spinning, then sleeping) until n operations finished.
  ::testing::AssertionResult await(int n) { return guest::await_completions(*transport, n, kBound); }
};

// Two connected ends, rank 0 on rxe0 and rank 1 on rxe1.
bool connect(End& e0, End& e1, int spin_us) {
  guest::Pair p;
  if (!guest::connect_pair(&p, kComm, kBound, spin_us)) return false;
  e0.transport = std::move(p.t0);
  e1.transport = std::move(p.t1);
  e0.conn = std::move(p.c0);
  e1.conn = std::move(p.c1);
  return true;
}

// `rounds` 8-byte round trips: e0 pings, e1 (on its own thread) echoes. Returns when both are
// done; `stop_when` (checked by the pinger after each round trip) may end it early.
template <typename Stop>
int ping_pong(End& e0, End& e1, int rounds, Stop stop_when) {
  std::promise<int> echoed;
  auto echoes = echoed.get_future();
  std::atomic<int> limit{rounds};
  std::thread echo([&] {
    int n = 0;
    for (; n < limit.load(); ++n) {
      if (!e1.conn->post_recv(e1.in, 8, 0).is_ok() || !e1.await(1)) break;
      if (e1.in[0] == 0xff) break;  // the pinger stopped early
      if (!e1.conn->post_send(e1.in, 8, 1).is_ok() || !e1.await(1)) break;
    }
    echoed.set_value(n);
  });
  int done = 0;
  for (; done < rounds; ++done) {
    e0.out[0] = static_cast<unsigned char>(done % 200);
    EXPECT_TRUE(e0.conn->post_recv(e0.in, 8, 0).is_ok());
    EXPECT_TRUE(e0.conn->post_send(e0.out, 8, 1).is_ok());
    const auto ok = e0.await(2);
    EXPECT_TRUE(ok);
    if (!ok) break;
    EXPECT_EQ(e0.in[0], e0.out[0]);
    if (stop_when()) {
      ++done;
      break;
    }
  }
  if (done < rounds) {  // tell the echo to stop: one more message, which it does not answer
    e0.out[0] = 0xff;
    EXPECT_TRUE(e0.conn->post_send(e0.out, 8, 1).is_ok());
    EXPECT_TRUE(e0.await(1));
  }
  echo.join();
  return echoes.get();
}

TEST(IbWaitGuest, AWaitWithinTheSpinIsCaughtByPollingNotBySleeping) {
  SKIP_OUTSIDE_GUEST();
  End e0, e1;
  ASSERT_TRUE(connect(e0, e1, 100000));  // BRAID_SPIN_US=100000: every round trip is far shorter
  ping_pong(e0, e1, 20, [] { return false; });  // warm-up (registrations, first CTS)
  const auto p0 = e0.ib().wait_stats(), q0 = e1.ib().wait_stats();
  constexpr int kRounds = 200;
  ping_pong(e0, e1, kRounds, [] { return false; });
  const auto p1 = e0.ib().wait_stats(), q1 = e1.ib().wait_stats();
  const uint64_t sleeps = (p1.sleeps - p0.sleeps) + (q1.sleeps - q0.sleeps);
  const uint64_t spins = (p1.spin_passes - p0.spin_passes) + (q1.spin_passes - q0.spin_passes);
  const uint64_t events = (p1.channel_events - p0.channel_events) + (q1.channel_events - q0.channel_events);
  EXPECT_GT(spins, 0u);
  // A sleep here would need a round trip longer than 100 ms: allow a rare stall of the
  // emulated machine, not one per round trip as a fixed short spin gave.
  EXPECT_LE(sleeps * 20, uint64_t{kRounds}) << sleeps << " sleeps, " << events << " channel events in " << kRounds
                                            << " round trips";
}

TEST(IbWaitGuest, NothingComingSleepsOnTheChannelInsteadOfSpinning) {
  SKIP_OUTSIDE_GUEST();
  End e0, e1;
  ASSERT_TRUE(connect(e0, e1, 0));
  const auto before = e0.ib().wait_stats();
  std::vector<Completion> got;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(e0.transport->poll(got, std::chrono::milliseconds(20)).is_ok());
  EXPECT_TRUE(got.empty());
  const auto after = e0.ib().wait_stats();
  EXPECT_EQ(after.polls - before.polls, 5u);
  EXPECT_EQ(after.spin_passes - before.spin_passes, 0u);
  EXPECT_GE(after.sleeps - before.sleeps, 5u);
  // A completion still wakes the sleeper: the peer's message, sent while it sleeps, arrives
  // through the completion channel.
  ASSERT_TRUE(e0.conn->post_recv(e0.in, 8, 0).is_ok());
  std::thread receiver([&] { EXPECT_TRUE(e0.await(1)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let it fall asleep first
  ASSERT_TRUE(e1.conn->post_send(e1.out, 8, 1).is_ok());
  EXPECT_TRUE(e1.await(1));
  receiver.join();
  EXPECT_GE(e0.ib().wait_stats().channel_events - after.channel_events, 1u);
}

TEST(IbWaitGuest, LearnsToSpinFromTheWaitsItSaw) {
  SKIP_OUTSIDE_GUEST();
  End e0, e1;
  ASSERT_TRUE(connect(e0, e1, 0));  // BRAID_SPIN_US=0: any spinning is learned
  // Within a bounded number of round trips, a window of recent waits shorter than the cap
  // (2 ms; a round trip here takes far less unless the machine stalls) makes the next waits
  // spin. Without the learning no wait would ever spin with BRAID_SPIN_US=0.
  constexpr int kMaxRounds = 3000;
  int rounds = ping_pong(e0, e1, kMaxRounds, [&] { return e0.ib().wait_stats().spin_passes > 0; });
  EXPECT_LT(rounds, kMaxRounds);
  EXPECT_GT(e0.ib().wait_stats().spin_passes, 0u);
}

}  // namespace
}  // namespace braid::transport::ib
