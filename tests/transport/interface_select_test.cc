#include "transport/common/interface_select.h"

#include <gtest/gtest.h>

namespace braid::transport::tcp {
namespace {

TEST(IfnameMatches, EmptySpecMatchesEverything) {
  EXPECT_TRUE(ifname_matches("", "eth0"));
  EXPECT_TRUE(ifname_matches("", "lo"));
}

TEST(IfnameMatches, PrefixesAndLists) {
  EXPECT_TRUE(ifname_matches("eth", "eth0"));
  EXPECT_TRUE(ifname_matches("ib,eth", "eth1"));
  EXPECT_TRUE(ifname_matches("ib,eth", "ib0"));
  EXPECT_FALSE(ifname_matches("eth", "enp3s0"));
  EXPECT_FALSE(ifname_matches("eth0", "eth"));
}

TEST(IfnameMatches, ExactNames) {
  EXPECT_TRUE(ifname_matches("=eth0", "eth0"));
  EXPECT_FALSE(ifname_matches("=eth0", "eth01"));
  EXPECT_TRUE(ifname_matches("=eth0,ib0", "ib0"));
}

TEST(IfnameMatches, Exclusions) {
  EXPECT_FALSE(ifname_matches("^docker,lo", "docker0"));
  EXPECT_FALSE(ifname_matches("^docker,lo", "lo"));
  EXPECT_TRUE(ifname_matches("^docker,lo", "eth0"));
  EXPECT_FALSE(ifname_matches("^=docker0", "docker0"));
  EXPECT_TRUE(ifname_matches("^=docker0", "docker01"));
}

LocalInterface iface(const std::string& name, const std::string& host, bool loopback) {
  return {name, SocketAddress::from_host(host, 0).value(), loopback};
}

TEST(ChooseInterface, FirstNonLoopbackIpv4ByDefault) {
  std::vector<LocalInterface> list = {iface("lo", "127.0.0.1", true), iface("eth0", "fd00::2", false),
                                      iface("eth0", "10.1.2.3", false)};
  auto c = choose_interface("", "", list);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c.value().address.host(), "10.1.2.3");
}

TEST(ChooseInterface, LoopbackWhenNothingElse) {
  auto c = choose_interface("", "", {iface("lo", "::1", true), iface("lo", "127.0.0.1", true)});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c.value().address.host(), "127.0.0.1");
}

TEST(ChooseInterface, SpecPicksAndExplainsMisses) {
  std::vector<LocalInterface> list = {iface("lo", "127.0.0.1", true), iface("eth0", "10.1.2.3", false)};
  EXPECT_EQ(choose_interface("lo", "", list).value().name, "lo");
  EXPECT_EQ(choose_interface("^lo", "", list).value().name, "eth0");
  auto miss = choose_interface("ib", "", list);
  ASSERT_FALSE(miss.is_ok());
  EXPECT_NE(miss.status().message().find("eth0"), std::string::npos) << miss.status().message();
}

TEST(ChooseInterface, RouteToMasterAddress) {
  std::vector<LocalInterface> list = {iface("eth0", "10.1.2.3", false), iface("lo", "127.0.0.1", true)};
  auto c = choose_interface("", "127.0.0.1", list);  // the kernel routes 127.0.0.1 via lo
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c.value().name, "lo");
}

TEST(SocketAddress, ParsesAndFormats) {
  auto v4 = SocketAddress::parse("10.0.0.2:41234");
  ASSERT_TRUE(v4.is_ok());
  EXPECT_EQ(v4.value().to_string(), "10.0.0.2:41234");
  auto v6 = SocketAddress::parse("[fd00::2]:80");
  ASSERT_TRUE(v6.is_ok());
  EXPECT_EQ(v6.value().to_string(), "[fd00::2]:80");
  EXPECT_EQ(v6.value().port(), 80);
  for (const char* bad : {"", "10.0.0.2", "10.0.0.2:", "10.0.0.2:0", "10.0.0.2:70000", "fd00::2:80", "host:80"}) {
    EXPECT_FALSE(SocketAddress::parse(bad).is_ok()) << bad;
  }
}

TEST(SocketAddress, LoopbackIsHostLocal) {
  for (const char* local : {"127.0.0.1:5000", "127.3.2.1:80", "[::1]:5000", "[::ffff:127.0.0.1]:5000"}) {
    auto a = SocketAddress::parse(local);
    ASSERT_TRUE(a.is_ok()) << local;
    EXPECT_TRUE(a.value().is_loopback()) << local;
  }
  for (const char* remote : {"10.0.0.2:5000", "128.0.0.1:80", "[fd00::2]:5000", "[::ffff:10.0.0.1]:5000"}) {
    auto a = SocketAddress::parse(remote);
    ASSERT_TRUE(a.is_ok()) << remote;
    EXPECT_FALSE(a.value().is_loopback()) << remote;
  }
}

}  // namespace
}  // namespace braid::transport::tcp
