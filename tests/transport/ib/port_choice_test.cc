// choose_port over fabricated port lists: which port, GID and MTU, and what the errors list.
#include "transport/ib/port_choice.h"

#include <gtest/gtest.h>

namespace braid::transport::ib {
namespace {

Gid gid(const std::string& address) {
  auto g = gid_of_address(address);
  EXPECT_TRUE(g.has_value()) << address;
  return g.value_or(Gid{});
}

// A RoCE port as rdma_rxe or a RoCE NIC shows it: a link-local GID per RoCE version, then one
// per version for each IPv4 address of its interface.
PortInfo roce(const std::string& device, bool active, const std::vector<std::string>& ipv4, int mtu = 1024,
              const std::string& netdev = "eth0") {
  PortInfo p;
  p.device = device;
  p.port = 1;
  p.active = active;
  p.state_name = active ? "ACTIVE" : "DOWN";
  p.active_mtu_bytes = mtu;
  p.ethernet = true;
  int index = 0;
  for (const std::string& a : [&] {
         std::vector<std::string> all = {"fe80::211:22ff:fe33:4455"};
         all.insert(all.end(), ipv4.begin(), ipv4.end());
         return all;
       }()) {
    p.gids.push_back({index++, gid(a), false, netdev});
    p.gids.push_back({index++, gid(a), true, netdev});
  }
  return p;
}

PortInfo infiniband(const std::string& device, int port, bool active, uint16_t lid) {
  PortInfo p;
  p.device = device;
  p.port = port;
  p.active = active;
  p.state_name = active ? "ACTIVE" : "DOWN";
  p.active_mtu_bytes = 4096;
  p.lid = lid;
  p.gids.push_back({0, gid("fe80::2:c903:a:b"), false, ""});
  return p;
}

HcaSpec spec(std::string_view text) {
  auto r = parse_hca_spec(text);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r.value() : HcaSpec{};
}

PortChoice choose_ok(const std::vector<PortInfo>& ports, std::string_view hca = "", std::optional<int> forced = {},
                     const std::string& ip = "") {
  auto r = choose_port(ports, spec(hca), forced, ip);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r.value() : PortChoice{};
}

std::string choose_error(const std::vector<PortInfo>& ports, std::string_view hca = "",
                         std::optional<int> forced = {}, const std::string& ip = "") {
  auto r = choose_port(ports, spec(hca), forced, ip);
  EXPECT_FALSE(r.is_ok()) << "chose " << (r.is_ok() ? r.value().why : "");
  return r.is_ok() ? "" : r.status().message();
}

TEST(PortChoice, InactivePortsAreSkipped) {
  PortChoice c = choose_ok({roce("rxe0", false, {"10.0.0.1"}), roce("rxe1", true, {"10.0.0.2"}, 4096)});
  EXPECT_EQ(c.device, "rxe1");
  EXPECT_EQ(c.port, 1);
  EXPECT_EQ(c.mtu_bytes, 4096) << "the port's active MTU, not a fixed one";
  EXPECT_TRUE(c.ethernet);
  EXPECT_NE(c.why.find("rxe1 port 1, GID index 3, MTU 4096"), std::string::npos) << c.why;
}

TEST(PortChoice, ExcludedDevicesAreSkipped) {
  const std::vector<PortInfo> ports = {roce("rxe0", true, {"10.0.0.1"}), roce("rxe1", true, {"10.0.0.2"})};
  EXPECT_EQ(choose_ok(ports).device, "rxe0");
  EXPECT_EQ(choose_ok(ports, "^rxe0").device, "rxe1");
  EXPECT_EQ(choose_ok(ports, "rxe1").device, "rxe1");
}

TEST(PortChoice, PortNumbersInTheSpecSelectAPortOfADevice) {
  const std::vector<PortInfo> ports = {infiniband("mlx5_0", 1, true, 3), infiniband("mlx5_0", 2, true, 4)};
  EXPECT_EQ(choose_ok(ports).port, 1);
  PortChoice c = choose_ok(ports, "mlx5_0:2");
  EXPECT_EQ(c.port, 2);
  EXPECT_EQ(c.lid, 4);
}

TEST(PortChoice, ExactNamesVersusPrefixes) {
  const std::vector<PortInfo> ports = {roce("mlx5_1", false, {"10.0.0.1"}), roce("mlx5_10", true, {"10.0.0.2"})};
  EXPECT_EQ(choose_ok(ports, "mlx5_1").device, "mlx5_10") << "a prefix also names mlx5_10";
  std::string m = choose_error(ports, "=mlx5_1");
  EXPECT_NE(m.find("mlx5_1 port 1 DOWN"), std::string::npos) << m;
  EXPECT_NE(m.find("mlx5_10 port 1 ACTIVE"), std::string::npos) << m;
  EXPECT_NE(m.find("not allowed by BRAID_IB_HCA"), std::string::npos) << m;
}

TEST(PortChoice, RoceGidOfTheBootstrapAddressWins) {
  const std::vector<PortInfo> ports = {roce("rxe0", true, {"10.0.0.5", "192.168.1.7"})};
  // indices: 0/1 link-local v1/v2, 2/3 10.0.0.5 v1/v2, 4/5 192.168.1.7 v1/v2
  EXPECT_EQ(choose_ok(ports, "", {}, "192.168.1.7").gid_index, 5);
  EXPECT_EQ(choose_ok(ports, "", {}, "10.0.0.5").gid_index, 3);
  PortChoice c = choose_ok(ports, "", {}, "192.168.1.7");
  EXPECT_EQ(c.gid, gid("192.168.1.7"));
  EXPECT_NE(c.why.find("bootstrap address ::ffff:192.168.1.7"), std::string::npos) << c.why;
}

TEST(PortChoice, WithoutABootstrapMatchTheFirstRoceV2Ipv4Gid) {
  const std::vector<PortInfo> ports = {roce("rxe0", true, {"10.0.0.5", "192.168.1.7"})};
  PortChoice none = choose_ok(ports);
  EXPECT_EQ(none.gid_index, 3) << "not the link-local GIDs 0/1, not the v1 GID 2";
  PortChoice elsewhere = choose_ok(ports, "", {}, "172.16.0.1");
  EXPECT_EQ(elsewhere.gid_index, 3);
  EXPECT_NE(elsewhere.why.find("no port has the bootstrap address 172.16.0.1"), std::string::npos) << elsewhere.why;
}

TEST(PortChoice, Ipv6BootstrapAddressAndIpv6OnlyPorts) {
  PortInfo p = roce("rxe0", true, {});
  p.gids.push_back({2, gid("2001:db8::5"), true, "eth0"});
  p.gids.push_back({3, gid("2001:db8::6"), true, "eth0"});
  EXPECT_EQ(choose_ok({p}, "", {}, "2001:db8::6").gid_index, 3);
  EXPECT_EQ(choose_ok({p}, "", {}, "[2001:db8::6]").gid_index, 3);
  // No IPv4 GID at all: the first RoCE v2 GID, the link-local one.
  EXPECT_EQ(choose_ok({p}).gid_index, 1);
}

// Two Soft-RoCE devices in one host (the guest), each rank bootstrapping from its own address:
// each takes the device holding its address, though both are ACTIVE.
TEST(PortChoice, APortHoldingTheBootstrapAddressIsPreferredOverAnEarlierOne) {
  const std::vector<PortInfo> ports = {roce("rxe0", true, {"10.99.0.1"}, 1024, "veth0"),
                                       roce("rxe1", true, {"10.99.0.2"}, 1024, "veth1")};
  PortChoice a = choose_ok(ports, "", {}, "10.99.0.1");
  EXPECT_EQ(a.device, "rxe0");
  EXPECT_EQ(a.gid_index, 3);
  PortChoice b = choose_ok(ports, "", {}, "10.99.0.2");
  EXPECT_EQ(b.device, "rxe1");
  EXPECT_EQ(b.gid_index, 3);
  EXPECT_NE(b.why.find("preferred over rxe0 port 1"), std::string::npos) << b.why;
  // BRAID_IB_HCA still rules.
  EXPECT_EQ(choose_ok(ports, "rxe0", {}, "10.99.0.2").device, "rxe0");
}

TEST(PortChoice, ForcedGidIndexIsUsedAsIs) {
  const std::vector<PortInfo> ports = {roce("rxe0", true, {"10.0.0.5"})};
  PortChoice c = choose_ok(ports, "", 0, "10.0.0.5");
  EXPECT_EQ(c.gid_index, 0) << "forced beats the bootstrap match, even a RoCE v1 GID";
  EXPECT_NE(c.why.find("BRAID_IB_GID_INDEX"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("RoCE v1"), std::string::npos) << c.why;
}

// Forcing the index does not undo the port preference: each rank still takes its own device.
TEST(PortChoice, ForcedGidIndexAppliesToThePortHoldingTheBootstrapAddress) {
  const std::vector<PortInfo> ports = {roce("rxe0", true, {"10.99.0.1"}, 1024, "veth0"),
                                       roce("rxe1", true, {"10.99.0.2"}, 1024, "veth1")};
  PortChoice c = choose_ok(ports, "", 3, "10.99.0.2");
  EXPECT_EQ(c.device, "rxe1");
  EXPECT_EQ(c.gid_index, 3);
  EXPECT_EQ(c.gid, gid("10.99.0.2"));
  EXPECT_EQ(choose_ok(ports, "", 3, "").device, "rxe0");
}

// A port without any RoCE v2 GID is usable when the index is forced: the user chose it.
TEST(PortChoice, ForcedGidIndexMayNameARoceV1Gid) {
  PortInfo v1_only = roce("rxe0", true, {});
  v1_only.gids = {{0, gid("fe80::1"), false, "eth0"}};
  PortChoice c = choose_ok({v1_only}, "", 0, "");
  EXPECT_EQ(c.gid_index, 0);
  EXPECT_NE(c.why.find("(RoCE v1 fe80::1)"), std::string::npos) << c.why;
}

TEST(PortChoice, ForcedGidIndexOutOfRangeNamesTheValidOnes) {
  const std::vector<PortInfo> ports = {roce("rxe0", true, {"10.0.0.5"})};
  std::string m = choose_error(ports, "", 7, "");
  EXPECT_NE(m.find("BRAID_IB_GID_INDEX=7 is not a valid GID of rxe0 port 1"), std::string::npos) << m;
  EXPECT_NE(m.find("valid GID indices are 0, 1, 2, 3"), std::string::npos) << m;
  EXPECT_NE(m.find("::ffff:10.0.0.5 v2"), std::string::npos) << "lists the table: " << m;
}

TEST(PortChoice, InfinibandUsesGidZeroAndKeepsTheLid) {
  PortChoice c = choose_ok({infiniband("mlx5_0", 1, false, 0), infiniband("mlx5_1", 1, true, 17)}, "", {}, "10.0.0.1");
  EXPECT_EQ(c.device, "mlx5_1");
  EXPECT_EQ(c.gid_index, 0);
  EXPECT_EQ(c.lid, 17);
  EXPECT_EQ(c.mtu_bytes, 4096);
  EXPECT_FALSE(c.ethernet);
}

TEST(PortChoice, RocePortWithoutV2GidIsSkipped) {
  PortInfo v1_only = roce("rxe0", true, {});
  v1_only.gids = {{0, gid("fe80::1"), false, "eth0"}};
  EXPECT_EQ(choose_ok({v1_only, roce("rxe1", true, {"10.0.0.2"})}).device, "rxe1");
  std::string m = choose_error({v1_only});
  EXPECT_NE(m.find("rxe0 port 1 ACTIVE"), std::string::npos) << m;
  EXPECT_NE(m.find("no RoCE v2 GID"), std::string::npos) << m;
}

TEST(PortChoice, NoUsablePortListsEverythingThatExistsAndWhatToSet) {
  PortInfo closed;
  closed.device = "mlx5_9";
  closed.port = 0;
  closed.state_name = "cannot open it: Permission denied";
  const std::vector<PortInfo> ports = {roce("rxe0", true, {"10.0.0.1"}), roce("rxe1", false, {"10.0.0.2"}),
                                       infiniband("mlx5_0", 1, false, 0), closed};
  std::string m = choose_error(ports, "^rxe0");
  EXPECT_EQ(m.rfind("ib: no usable RDMA port with BRAID_IB_HCA='^rxe0'", 0), 0u) << m;
  EXPECT_NE(m.find("rxe0 port 1 ACTIVE (RoCE, MTU 1024; GIDs 0 fe80::211:22ff:fe33:4455 v1 eth0"), std::string::npos) << m;
  EXPECT_NE(m.find("not allowed by BRAID_IB_HCA"), std::string::npos) << m;
  EXPECT_NE(m.find("rxe1 port 1 DOWN"), std::string::npos) << m;
  EXPECT_NE(m.find("mlx5_0 port 1 DOWN (InfiniBand, MTU 4096, LID 0): not ACTIVE"), std::string::npos) << m;
  EXPECT_NE(m.find("mlx5_9 (cannot open it: Permission denied): cannot be used"), std::string::npos) << m;
  for (const char* hint : {"BRAID_IB_HCA", "BRAID_IB_GID_INDEX", "BRAID_TRANSPORT=tcp"}) {
    EXPECT_NE(m.find(hint), std::string::npos) << hint << " in " << m;
  }
}

TEST(PortChoice, NoDeviceAtAll) {
  auto r = choose_port({}, HcaSpec{}, {}, "10.0.0.1");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("no RDMA device"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("BRAID_TRANSPORT=tcp"), std::string::npos) << r.status().message();
}

TEST(PortChoice, GidText) {
  EXPECT_EQ(format_gid(gid("10.99.0.1")), "::ffff:10.99.0.1");
  EXPECT_TRUE(is_ipv4_mapped(gid("10.99.0.1")));
  EXPECT_FALSE(is_ipv4_mapped(gid("fe80::1")));
  EXPECT_EQ(gid_of_address("[fe80::1%eth0]"), gid("fe80::1"));
  EXPECT_FALSE(gid_of_address("").has_value());
  EXPECT_FALSE(gid_of_address("node7").has_value());
}

}  // namespace
}  // namespace braid::transport::ib
