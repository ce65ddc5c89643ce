// The port braidrun keeps free for rank 0's torch store (tools/braidrun/port_reservation.h):
// nobody binding it plainly gets it while it is held, a server that binds it the way torch's
// TCPStore does (SO_REUSEADDR) can listen on it and be reached, and it is free again after.
#include "tools/braidrun/port_reservation.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace braid::braidrun {
namespace {

// A TCP socket of `family` bound to the wildcard address at `port` (SO_REUSEADDR when
// `reuse`); -1 when bind fails.
int bind_port(int family, uint16_t port, bool reuse) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  if (reuse) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(port);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(port);
    len = sizeof *a;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool connects(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

TEST(PortReservation, HeldAgainstPlainBindsButOpenToAReuseAddrServer) {
  uint16_t port = 0;
  {
    auto held = PortReservation::any_free();
    ASSERT_TRUE(held.is_ok()) << held.status().message();
    port = (*held)->port();
    ASSERT_NE(port, 0);
    EXPECT_EQ(bind_port(AF_INET, port, /*reuse=*/false), -1) << "a plain IPv4 bind got the held port";
    EXPECT_FALSE(connects(port)) << "nothing listens yet";
    // As torch's TCPStore server: SO_REUSEADDR, then listen; clients reach it.
    int server = bind_port(AF_INET, port, /*reuse=*/true);
    ASSERT_GE(server, 0) << "a SO_REUSEADDR server could not bind the held port";
    ASSERT_EQ(listen(server, 8), 0);
    EXPECT_TRUE(connects(port));
    close(server);
  }
  int again = bind_port(AF_INET, port, /*reuse=*/false);
  EXPECT_GE(again, 0) << "port " << port << " still held after the reservation went";
  if (again >= 0) close(again);
}

}  // namespace
}  // namespace braid::braidrun
