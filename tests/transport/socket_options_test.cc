// Options every data socket gets (socket_setup.h), read back from real loopback and eth sockets:
// the congestion control of loopback sockets (BRAID_LOOPBACK_CC).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "tests/transport/transport_link.h"
#include "transport/common/interface_select.h"
#include "transport/common/socket_setup.h"

namespace braid::transport::tcp {
namespace {

std::string congestion_control(int fd) {
  char name[16] = {};
  socklen_t len = sizeof name;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "getsockopt failed";
  return name;
}

std::string system_default() {
  std::string cc;
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_congestion_control"), cc);
  return cc;
}

// Both ends of a TCP connection to `host`, each as tune_data_socket(env) leaves it.
struct Pair {
  UniqueFd a, b;
  Status tuned;
};

Pair connect_pair(const SocketAddress& host, const Env& env) {
  Pair p;
  auto l = listen_on(host, 0, 0);
  if (!l.is_ok()) return {UniqueFd(), UniqueFd(), l.status()};
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(l.value().get(), reinterpret_cast<sockaddr*>(&bound), &len);
  auto c = connect_with_retry(SocketAddress::from_sockaddr(reinterpret_cast<sockaddr*>(&bound), len),
                              Deadline::after(std::chrono::seconds(5)));
  if (!c.is_ok()) return {UniqueFd(), UniqueFd(), c.status()};
  auto a = accept_one(l.value().get(), 5000);
  if (!a.is_ok()) return {UniqueFd(), UniqueFd(), a.status()};
  p.a = std::move(c).value();
  p.b = std::move(a).value();
  p.tuned = tune_data_socket(p.a.get(), env);
  if (p.tuned.is_ok()) p.tuned = tune_data_socket(p.b.get(), env);
  return p;
}

SocketAddress loopback() { return SocketAddress::from_host("127.0.0.1", 0).value(); }

TEST(LoopbackCongestionControl, RenoByDefault) {
  Pair p = connect_pair(loopback(), Env{});
  ASSERT_TRUE(p.tuned.is_ok()) << p.tuned.message();
  EXPECT_EQ(congestion_control(p.a.get()), "reno");
  EXPECT_EQ(congestion_control(p.b.get()), "reno");
}

TEST(LoopbackCongestionControl, IPv6LoopbackToo) {
  auto v6 = SocketAddress::from_host("::1", 0);
  ASSERT_TRUE(v6.is_ok()) << v6.status().message();
  Pair p = connect_pair(v6.value(), Env{});
  if (!p.tuned.is_ok() && p.tuned.message().find("Address family") != std::string::npos) {
    GTEST_SKIP() << "no IPv6 here: " << p.tuned.message();
  }
  ASSERT_TRUE(p.tuned.is_ok()) << p.tuned.message();
  EXPECT_EQ(congestion_control(p.a.get()), "reno");
}

TEST(LoopbackCongestionControl, SystemKeepsTheKernelsDefault) {
  Env env;
  env.loopback_cc = "system";
  Pair p = connect_pair(loopback(), env);
  ASSERT_TRUE(p.tuned.is_ok()) << p.tuned.message();
  EXPECT_EQ(congestion_control(p.a.get()), system_default());
}

TEST(LoopbackCongestionControl, AnUnknownNameIsAClearError) {
  Env env;
  env.loopback_cc = "nosuchcc";
  Pair p = connect_pair(loopback(), env);
  ASSERT_FALSE(p.tuned.is_ok());
  EXPECT_EQ(p.tuned.code(), ErrorCode::invalid_argument);
  EXPECT_NE(p.tuned.message().find("BRAID_LOOPBACK_CC=nosuchcc"), std::string::npos) << p.tuned.message();
  EXPECT_NE(p.tuned.message().find("allowed here"), std::string::npos) << p.tuned.message();
  EXPECT_NE(p.tuned.message().find("BRAID_LOOPBACK_CC=system"), std::string::npos) << p.tuned.message();
}

// An IPv4 address of an interface that is up and not loopback (the last one listed), if any.
std::optional<SocketAddress> network_ipv4() {
  std::optional<SocketAddress> found;
  for (const auto& i : list_interfaces()) {
    if (!i.loopback && i.address.family() == AF_INET) found = i.address;
  }
  return found;
}

// A socket to an address of a real interface (even this host's own) keeps the kernel's choice:
// a network may be there.
TEST(LoopbackCongestionControl, OtherAddressesAreLeftAlone) {
  const std::optional<SocketAddress> eth = network_ipv4();
  if (!eth) GTEST_SKIP() << "no up IPv4 interface besides loopback";
  Env env;
  env.loopback_cc = "nosuchcc";  // would fail if it were applied
  Pair p = connect_pair(*eth, env);
  ASSERT_TRUE(p.tuned.is_ok()) << p.tuned.message();
  EXPECT_EQ(congestion_control(p.a.get()), system_default());
}

// BRAID_NETWORK_CC applies to those sockets, and only to them.
TEST(NetworkCongestionControl, AppliesToSocketsOfOtherAddresses) {
  const std::optional<SocketAddress> eth = network_ipv4();
  if (!eth) GTEST_SKIP() << "no up IPv4 interface besides loopback";
  Env env;
  env.network_cc = "reno";
  Pair p = connect_pair(*eth, env);
  ASSERT_TRUE(p.tuned.is_ok()) << p.tuned.message();
  EXPECT_EQ(congestion_control(p.a.get()), "reno");
  EXPECT_EQ(congestion_control(p.b.get()), "reno");
  env.network_cc = "nosuchcc";
  Pair bad = connect_pair(*eth, env);
  ASSERT_FALSE(bad.tuned.is_ok());
  EXPECT_NE(bad.tuned.message().find("BRAID_NETWORK_CC=nosuchcc"), std::string::npos) << bad.tuned.message();
  EXPECT_NE(bad.tuned.message().find("network socket"), std::string::npos) << bad.tuned.message();
  env.network_cc = "nosuchcc";  // a loopback socket does not read it
  Pair lo = connect_pair(loopback(), env);
  ASSERT_TRUE(lo.tuned.is_ok()) << lo.tuned.message();
  EXPECT_EQ(congestion_control(lo.a.get()), "reno");
}

// Through the transport: a name the kernel refuses fails the connection on both ends, each error
// naming the variable, what to set instead and the peer.
TEST(LoopbackCongestionControl, ARefusedNameFailsBothEndsOfTheConnection) {
  TransportOptions o = testing::loopback_options();
  o.env.loopback_cc = "nosuchcc";
  auto a = create_transport("tcp-poll", o);
  auto b = create_transport("tcp-poll", o);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto addr = a.value()->listen();
  ASSERT_TRUE(addr.is_ok()) << addr.status().message();
  Result<std::unique_ptr<Connection>> connected = Status(ErrorCode::internal, "connect did not run");
  std::thread connector([&] {
    connected = b.value()->connect(addr.value(), PeerIdentity{7, 1, 0}, Deadline::after(std::chrono::seconds(20)));
  });
  auto accepted = a.value()->accept(PeerIdentity{7, 0, 1}, Deadline::after(std::chrono::seconds(20)));
  connector.join();
  ASSERT_FALSE(connected.is_ok());
  EXPECT_NE(connected.status().message().find("rank 1 connecting to rank 0 at " + addr.value()), std::string::npos)
      << connected.status().message();
  EXPECT_NE(connected.status().message().find("BRAID_LOOPBACK_CC=nosuchcc"), std::string::npos)
      << connected.status().message();
  ASSERT_FALSE(accepted.is_ok());
  EXPECT_NE(accepted.status().message().find("rank 0 accepting rank 1 from 127.0.0.1"), std::string::npos)
      << accepted.status().message();
  EXPECT_NE(accepted.status().message().find("BRAID_LOOPBACK_CC=system"), std::string::npos)
      << accepted.status().message();
}

}  // namespace
}  // namespace braid::transport::tcp
