// Connection::peer_ended() over ib across two processes, in the Soft-RoCE guest
// (scripts/rdma_guest.sh). This process is rank 0 on rxe0 (10.99.0.1); the peer is
// ib_peer_ended_peer on rxe1 (10.99.0.2), which accepts and then only lives. transport.h's
// contract, as shrink relies on it to suspect the ranks of a lost host:
//   - false while the peer lives, and while it is stopped (SIGSTOP): slow is not gone;
//   - true soon after the peer is killed -9, read from the socket's end alone (nobody drives
//     the transport), and still true once the transport read that end and failed the connection;
//   - true after the peer's normal close() while its process lives on, before and after the
//     transport read its goodbye;
//   - after this end's own close(): false while the peer lives, true once it is killed.
// Outside the guest it skips.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "tests/support/subprocess.h"
#include "tests/transport/ib/soft_roce_guest.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace braid::transport::ib {
namespace {

using braid::testing::Subprocess;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Every step ends well within it under emulation; a peer_ended() that never turns fails instead.
constexpr auto kBound = seconds(20);

// The peer process and rank 0's connection to it.
struct Link {
  std::unique_ptr<Subprocess> peer;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Connection> connection;
};

// The text after `tag ` on the peer's line that starts with it, waiting up to kBound for it;
// nullopt (with the peer's output as a test failure) when it does not come.
std::optional<std::string> await_line(Subprocess& peer, const std::string& tag) {
  const Deadline deadline = Deadline::after(kBound);
  for (;;) {
    const std::string out = peer.output();
    for (size_t at = 0; at < out.size();) {
      size_t end = out.find('\n', at);
      if (end == std::string::npos) break;  // a line still being written
      const std::string line = out.substr(at, end - at);
      if (line == tag) return std::string();
      if (line.rfind(tag + " ", 0) == 0) return line.substr(tag.size() + 1);
      at = end + 1;
    }
    if (deadline.expired()) {
      ADD_FAILURE() << "the peer did not say " << tag << ":\n" << out;
      return std::nullopt;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}

bool connect_to_peer(Link* link) {
  link->peer = std::make_unique<Subprocess>(std::vector<std::string>{PEER, "10.99.0.2"});
  const auto address = await_line(*link->peer, "ADDRESS");
  if (!address) return false;
  TransportOptions o;
  o.listen_host = "10.99.0.1";
  auto t = create_transport("ib", o);
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  if (!t.is_ok()) return false;
  link->transport = std::move(t).value();
  EXPECT_TRUE(link->transport->listen().is_ok());
  auto c = link->transport->connect(*address, PeerIdentity{.comm_id = 33, .self_rank = 0, .peer_rank = 1},
                                    Deadline::after(kBound));
  EXPECT_TRUE(c.is_ok()) << c.status().message();
  if (!c.is_ok()) return false;
  link->connection = std::move(c).value();
  return await_line(*link->peer, "CONNECTED").has_value();
}

// Whether peer_ended() turns true within kBound, asking every 10 ms; with `drive`, polling the
// transport between asks, as the runtime's progress loop does.
bool turns_true(Link& link, bool drive) {
  const Deadline deadline = Deadline::after(kBound);
  std::vector<Completion> got;
  while (!link.connection->peer_ended()) {
    if (deadline.expired()) return false;
    if (drive) {
      got.clear();
      (void)link.transport->poll(got, milliseconds(10));
    } else {
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  return true;
}

// Asked repeatedly over `span`, peer_ended() never said true.
bool stays_false(Link& link, milliseconds span) {
  const Deadline deadline = Deadline::after(span);
  while (!deadline.expired()) {
    if (link.connection->peer_ended()) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

TEST(IbPeerEndedGuest, FalseWhileThePeerLivesOrIsStoppedTrueSoonAfterItIsKilled) {
  SKIP_OUTSIDE_GUEST();
  Link link;
  ASSERT_TRUE(connect_to_peer(&link));
  EXPECT_TRUE(stays_false(link, milliseconds(500))) << "said true of a live peer";
  link.peer->kill(SIGSTOP);
  EXPECT_TRUE(stays_false(link, milliseconds(1500))) << "said true of a stopped peer";
  link.peer->kill(SIGCONT);
  EXPECT_TRUE(stays_false(link, milliseconds(300))) << "said true of a peer that came back";
  // A receive outstanding, so that driving the transport below fails the connection.
  char byte = 0;
  ASSERT_TRUE(link.connection->post_recv(&byte, 1, 7).is_ok());
  link.peer->kill(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(turns_true(link, /*drive=*/false)) << "still false " << kBound.count() << " s after kill -9";
  std::printf("peer_ended() true %.0f ms after kill -9\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed).count());
  // Once the transport has read the end: the receive fails, and peer_ended() stays true.
  const Deadline deadline = Deadline::after(kBound);
  std::vector<Completion> got;
  while (got.empty() && !deadline.expired()) ASSERT_TRUE(link.transport->poll(got, milliseconds(100)).is_ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status.code(), ErrorCode::peer_lost) << got[0].status.message();
  EXPECT_TRUE(link.connection->peer_ended());
}

TEST(IbPeerEndedGuest, TrueAfterThePeersNormalCloseWhileItLivesOn) {
  SKIP_OUTSIDE_GUEST();
  Link link;
  ASSERT_TRUE(connect_to_peer(&link));
  EXPECT_TRUE(stays_false(link, milliseconds(300))) << "said true of a live peer";
  link.peer->kill(SIGUSR1);
  ASSERT_TRUE(await_line(*link.peer, "CLOSED").has_value());
  EXPECT_TRUE(turns_true(link, /*drive=*/false)) << "still false " << kBound.count() << " s after the peer's close()";
  // The transport reads the goodbye: still true (now from the goodbye itself).
  std::vector<Completion> got;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(link.transport->poll(got, milliseconds(10)).is_ok());
  EXPECT_TRUE(link.connection->peer_ended());
  EXPECT_EQ(link.peer->wait(milliseconds(0)), -1) << "the peer exited; it should live on after close():\n"
                                                  << link.peer->output();
}

// After this end's close() (as shrink() asks, once the failed communicator closed its
// connections): still false while the peer lives, true once it is killed -9.
TEST(IbPeerEndedGuest, AfterThisEndClosedTrueOnceThePeerIsKilled) {
  SKIP_OUTSIDE_GUEST();
  Link link;
  ASSERT_TRUE(connect_to_peer(&link));
  link.connection->close();
  EXPECT_TRUE(stays_false(link, milliseconds(500))) << "said true of a live peer after this end's close()";
  link.peer->kill(SIGKILL);
  EXPECT_TRUE(turns_true(link, /*drive=*/false)) << "still false " << kBound.count() << " s after kill -9";
}

}  // namespace
}  // namespace braid::transport::ib
