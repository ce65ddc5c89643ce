#include "transport/ib/port_choice.h"

#include <arpa/inet.h>

#include <cstring>

namespace braid::transport::ib {
namespace {

// Which GID of `port` to use without BRAID_IB_GID_INDEX, and by which rule; index -1 when the
// port has none it can use.
struct GidPick {
  int index = -1;
  bool bootstrap_match = false;
  std::string rule;
};

GidPick pick_gid(const PortInfo& port, const std::optional<Gid>& bootstrap_gid) {
  if (!port.ethernet) return {0, false, "GID 0 (InfiniBand addresses by LID)"};
  const GidInfo* ipv4 = nullptr;
  const GidInfo* any = nullptr;
  for (const GidInfo& g : port.gids) {
    if (!g.roce_v2) continue;
    if (bootstrap_gid && g.gid == *bootstrap_gid) {
      return {g.index, true, "the RoCE v2 GID of the bootstrap address " + format_gid(g.gid)};
    }
    if (ipv4 == nullptr && is_ipv4_mapped(g.gid)) ipv4 = &g;
    if (any == nullptr) any = &g;
  }
  if (ipv4 != nullptr) return {ipv4->index, false, "the first RoCE v2 IPv4 GID " + format_gid(ipv4->gid)};
  if (any != nullptr) return {any->index, false, "the first RoCE v2 GID " + format_gid(any->gid)};
  return {};
}

std::string valid_indices(const PortInfo& port) {
  if (port.gids.empty()) return "its GID table has no valid entry";
  std::string out = "its valid GID indices are";
  for (size_t i = 0; i < port.gids.size(); ++i) out += (i == 0 ? " " : ", ") + std::to_string(port.gids[i].index);
  return out;
}

PortChoice make_choice(const PortInfo& port, const GidInfo* gid, int gid_index, std::string why) {
  PortChoice c;
  c.device = port.device;
  c.port = port.port;
  c.gid_index = gid_index;
  c.mtu_bytes = port.active_mtu_bytes;
  c.ethernet = port.ethernet;
  c.lid = port.lid;
  if (gid != nullptr) c.gid = gid->gid;
  c.why = port.device + " port " + std::to_string(port.port) + ", GID index " + std::to_string(gid_index) +
          ", MTU " + std::to_string(port.active_mtu_bytes) + ": " + std::move(why);
  return c;
}

const GidInfo* find_gid(const PortInfo& port, int index) {
  for (const GidInfo& g : port.gids) {
    if (g.index == index) return &g;
  }
  return nullptr;
}

}  // namespace

std::string format_gid(const Gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, gid.data(), text, sizeof text) == nullptr) return "?";
  return text;
}

bool is_ipv4_mapped(const Gid& gid) {
  for (size_t i = 0; i < 10; ++i) {
    if (gid[i] != 0) return false;
  }
  return gid[10] == 0xff && gid[11] == 0xff;
}

std::optional<Gid> gid_of_address(const std::string& ip) {
  std::string text = ip;
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  text = text.substr(0, text.find('%'));  // an IPv6 zone ("fe80::1%eth0") is not part of the GID
  Gid gid{};
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    gid[10] = gid[11] = 0xff;
    std::memcpy(gid.data() + 12, &v4, 4);
    return gid;
  }
  if (inet_pton(AF_INET6, text.c_str(), gid.data()) == 1) return gid;
  return std::nullopt;
}

std::string describe_port(const PortInfo& port) {
  if (port.port == 0) return port.device + " (" + port.state_name + ")";
  std::string out = port.device + " port " + std::to_string(port.port) + " " + port.state_name + " (" +
                    (port.ethernet ? "RoCE" : "InfiniBand") + ", MTU " + std::to_string(port.active_mtu_bytes);
  if (!port.ethernet) out += ", LID " + std::to_string(port.lid);
  if (port.ethernet) {
    out += "; GIDs";
    if (port.gids.empty()) out += " none";
    for (size_t i = 0; i < port.gids.size(); ++i) {
      const GidInfo& g = port.gids[i];
      out += (i == 0 ? " " : ", ") + std::to_string(g.index) + " " + format_gid(g.gid) + (g.roce_v2 ? " v2" : " v1");
      if (!g.netdev.empty()) out += " " + g.netdev;
    }
  }
  return out + ")";
}

Result<PortChoice> choose_port(const std::vector<PortInfo>& ports, const HcaSpec& spec,
                               std::optional<int> forced_gid, const std::string& bootstrap_ip) {
  const std::string hca = spec.text.empty() ? "" : " with BRAID_IB_HCA='" + spec.text + "'";
  if (ports.empty()) {
    return Status(ErrorCode::system,
                  "ib: this host has no RDMA device (ibv_get_device_list lists none): load the NIC's driver "
                  "(mlx5_ib, ...; for Soft-RoCE `rdma link add rxe0 type rxe netdev IFACE`), or set BRAID_TRANSPORT=tcp");
  }
  const std::optional<Gid> bootstrap_gid = gid_of_address(bootstrap_ip);
  std::vector<std::string> notes;  // one per port that was passed over, for the error
  const PortInfo* first = nullptr;       // the first usable port
  const PortInfo* preferred = nullptr;   // the first usable port holding the bootstrap address
  for (const PortInfo& p : ports) {
    std::string reason;
    if (p.port == 0) {
      reason = "cannot be used";
    } else if (!hca_spec_allows(spec, p.device, p.port)) {
      reason = "not allowed by BRAID_IB_HCA";
    } else if (!p.active) {
      reason = "not ACTIVE";
    } else if (!forced_gid && pick_gid(p, bootstrap_gid).index < 0) {
      reason = "no RoCE v2 GID";
    }
    if (!reason.empty()) {
      notes.push_back(describe_port(p) + ": " + reason);
      continue;
    }
    if (first == nullptr) first = &p;
    if (preferred == nullptr && p.ethernet && pick_gid(p, bootstrap_gid).bootstrap_match) preferred = &p;
  }
  if (first != nullptr) {
    const PortInfo& p = preferred != nullptr ? *preferred : *first;
    std::string why = preferred == nullptr ? "the first ACTIVE port BRAID_IB_HCA allows"
                                           : "the port holding the bootstrap address " + bootstrap_ip;
    if (preferred != nullptr && preferred != first) {
      why += " (preferred over " + first->device + " port " + std::to_string(first->port) + ")";
    }
    if (forced_gid) {
      const GidInfo* g = find_gid(p, *forced_gid);
      if (g == nullptr) {
        return invalid_argument("ib: BRAID_IB_GID_INDEX=" + std::to_string(*forced_gid) + " is not a valid GID of " +
                                p.device + " port " + std::to_string(p.port) + ": " + valid_indices(p) + " (" +
                                describe_port(p) + "). Set BRAID_IB_GID_INDEX to one of them, or unset it to choose "
                                "automatically");
      }
      why += "; GID forced by BRAID_IB_GID_INDEX";
      if (p.ethernet) why += std::string(g->roce_v2 ? " (RoCE v2 " : " (RoCE v1 ") + format_gid(g->gid) + ")";
      return make_choice(p, g, *forced_gid, std::move(why));
    }
    const GidPick pick = pick_gid(p, bootstrap_gid);
    why += "; " + pick.rule;
    if (p.ethernet && bootstrap_gid && preferred == nullptr) {
      why += " (no port has the bootstrap address " + bootstrap_ip + ")";
    }
    return make_choice(p, find_gid(p, pick.index), pick.index, std::move(why));
  }
  std::string msg = "ib: no usable RDMA port" + hca + ". This host has: ";
  for (size_t i = 0; i < notes.size(); ++i) msg += (i == 0 ? "" : "; ") + notes[i];
  msg += ". Set BRAID_IB_HCA to an ACTIVE port listed here, BRAID_IB_GID_INDEX to a GID of it, or BRAID_TRANSPORT=tcp";
  return invalid_argument(msg);
}

}  // namespace braid::transport::ib
