// transport/ib/port_choice.h - which device, port, GID and MTU a rank's ib transport uses.
//
// Pure: it works on a description of the ports (ib_devices.h fills it from verbs), so every rule
// is tested with fabricated port lists on machines without RDMA.
//
// The rules, in order:
//  - only ports BRAID_IB_HCA allows, and only ACTIVE ones;
//  - on RoCE a port needs a RoCE v2 GID (v1 is not routable across subnets, and is skipped);
//  - a port holding the RoCE v2 GID of the bootstrap address wins over an earlier port: it is
//    the interface the job's other ranks already reach this one by (two Soft-RoCE devices in one
//    host, or a dual-port NIC on two subnets); otherwise the first usable port;
//  - its GID: BRAID_IB_GID_INDEX when set (range-checked), else the RoCE v2 GID of the bootstrap
//    address, else the first RoCE v2 IPv4 GID, else the first RoCE v2 GID. InfiniBand ports use
//    GID index 0 unless forced (addressing is by LID).
// With BRAID_IB_GID_INDEX set, a RoCE port needs no v2 GID (the user chose the index).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/ib/hca_spec.h"

namespace braid::transport::ib {

using Gid = std::array<uint8_t, 16>;

struct GidInfo {
  int index = 0;
  Gid gid{};
  bool roce_v2 = false;  // RoCE v2 (UDP/IP); false: RoCE v1 or InfiniBand
  std::string netdev;    // the network interface the GID belongs to; empty on InfiniBand
};

struct PortInfo {
  std::string device;           // "mlx5_0", "rxe0"
  int port = 1;                 // 1-based; 0 when the device could not be opened
  bool active = false;          // IBV_PORT_ACTIVE
  std::string state_name;       // "ACTIVE", "DOWN", ... or why the device could not be queried
  int active_mtu_bytes = 0;     // 256..4096
  bool ethernet = false;        // RoCE (link layer Ethernet); false: InfiniBand
  uint16_t lid = 0;             // InfiniBand's local id; 0 on RoCE
  std::vector<GidInfo> gids;    // the valid entries of the GID table, by index
};

struct PortChoice {
  std::string device;
  int port = 1;
  int gid_index = 0;
  int mtu_bytes = 0;
  bool ethernet = false;
  uint16_t lid = 0;
  Gid gid{};
  std::string why;  // one line for BRAID_DEBUG=INFO: what was chosen and by which rule
};

// Picks the port, GID and MTU by the rules above. `forced_gid` is BRAID_IB_GID_INDEX;
// `bootstrap_ip` the address (IPv4 or IPv6 text) this rank's bootstrap connection uses, or
// empty. When nothing fits, the error lists every device and port that exists with its state
// and says what to set (BRAID_IB_HCA, BRAID_IB_GID_INDEX, BRAID_TRANSPORT=tcp).
Result<PortChoice> choose_port(const std::vector<PortInfo>& ports, const HcaSpec& spec,
                               std::optional<int> forced_gid, const std::string& bootstrap_ip);

// "fe80::1", "::ffff:10.99.0.1": a GID as an IPv6 address.
std::string format_gid(const Gid& gid);
// Whether the GID is an IPv4-mapped IPv6 address (::ffff:a.b.c.d).
bool is_ipv4_mapped(const Gid& gid);
// The GID RoCE v2 gives the address `ip` (IPv4 mapped, or IPv6 as is); nullopt if not an address.
std::optional<Gid> gid_of_address(const std::string& ip);
// "rxe0 port 1 ACTIVE (RoCE, MTU 1024, GIDs 0 fe80::... v1 veth0, 1 ::ffff:10.99.0.1 v2 veth0)".
std::string describe_port(const PortInfo& port);

}  // namespace braid::transport::ib
