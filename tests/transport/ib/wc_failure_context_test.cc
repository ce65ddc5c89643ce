// Whether the peer's liveness socket says it died (wc_failure_context.h): EOF or a reset counts,
// a goodbye waiting to be read or a silent live socket does not, and nothing is consumed. On the
// host, over socket pairs; explain_wc_failure on a real device is in ib_faults_guest_test.
#include "transport/ib/wc_failure_context.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace braid::transport::ib {
namespace {

struct Pair {
  int fd[2] = {-1, -1};
  Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~Pair() {
    for (int f : fd) {
      if (f >= 0) close(f);
    }
  }
  void close_peer() {
    close(fd[1]);
    fd[1] = -1;
  }
};

TEST(WcFailureContext, ClosedWithoutGoodbyeIsEnded) {
  Pair p;
  p.close_peer();
  EXPECT_TRUE(peer_socket_ended(p.fd[0], std::chrono::milliseconds(0)));
}

TEST(WcFailureContext, AClosingPeerIsSeenWithinTheGrace) {
  Pair p;
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    p.close_peer();
  });
  EXPECT_TRUE(peer_socket_ended(p.fd[0], std::chrono::seconds(20)));
  closer.join();
}

TEST(WcFailureContext, ALivePeerIsNotEndedAfterTheGrace) {
  Pair p;
  EXPECT_FALSE(peer_socket_ended(p.fd[0], std::chrono::milliseconds(30)));
}

TEST(WcFailureContext, AGoodbyeWaitingIsNotADeathAndStaysUnread) {
  Pair p;
  const unsigned char bye[3] = {0xb7, 1, 2};
  ASSERT_EQ(write(p.fd[1], bye, sizeof bye), 3);
  p.close_peer();
  EXPECT_FALSE(peer_socket_ended(p.fd[0], std::chrono::milliseconds(0)));
  unsigned char got[3] = {};
  EXPECT_EQ(read(p.fd[0], got, sizeof got), 3);  // still there for the connection to read
  EXPECT_EQ(got[0], 0xb7);
}

TEST(WcFailureContext, NoSocketIsNotEnded) { EXPECT_FALSE(peer_socket_ended(-1, std::chrono::milliseconds(0))); }

}  // namespace
}  // namespace braid::transport::ib
