#include "transport/ib/ib_devices.h"

#include <infiniband/verbs.h>
#include <net/if.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>

#include "transport/ib/gid_sysfs.h"

namespace braid::transport::ib {
namespace {

struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};
struct ContextDeleter {
  void operator()(ibv_context* ctx) const { ibv_close_device(ctx); }
};

// "ACTIVE", "DOWN", ...: as ibv_devinfo prints them (rdma-core's own string is "active",
// "PORT_ACTIVE" or similar, by version).
std::string state_name(ibv_port_state state) {
  std::string s = ibv_port_state_str(state);
  if (s.starts_with("PORT_")) s = s.substr(5);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

PortInfo unusable(const std::string& device, const std::string& why) {
  PortInfo p;
  p.device = device;
  p.port = 0;
  p.state_name = why;
  return p;
}

// Every valid GID of the device, from the kernel's table query, or from sysfs where the kernel
// lacks it. Indexed by port.
std::vector<std::vector<GidInfo>> read_gids(ibv_context* ctx, const std::string& device,
                                            const std::vector<ibv_port_attr>& ports) {
  std::vector<std::vector<GidInfo>> out(ports.size() + 1);
  size_t total = 0;
  for (const ibv_port_attr& p : ports) total += static_cast<size_t>(p.gid_tbl_len);
  std::vector<ibv_gid_entry> entries(total);
  const ssize_t n = total == 0 ? 0 : ibv_query_gid_table(ctx, entries.data(), entries.size(), 0);
  if (n < 0) {
    for (size_t port = 1; port <= ports.size(); ++port) {
      out[port] = read_gids_sysfs("/sys/class/infiniband/" + device + "/ports/" + std::to_string(port),
                                  ports[port - 1].gid_tbl_len);
    }
    return out;
  }
  for (ssize_t i = 0; i < n; ++i) {
    const ibv_gid_entry& e = entries[static_cast<size_t>(i)];
    if (e.port_num < 1 || e.port_num > ports.size()) continue;
    GidInfo g;
    g.index = static_cast<int>(e.gid_index);
    std::memcpy(g.gid.data(), e.gid.raw, g.gid.size());
    g.roce_v2 = e.gid_type == IBV_GID_TYPE_ROCE_V2;
    char name[IF_NAMESIZE] = {};
    if (e.ndev_ifindex != 0 && if_indextoname(e.ndev_ifindex, name) != nullptr) g.netdev = name;
    out[e.port_num].push_back(std::move(g));
  }
  for (auto& gids : out) {
    std::sort(gids.begin(), gids.end(), [](const GidInfo& a, const GidInfo& b) { return a.index < b.index; });
  }
  return out;
}

}  // namespace

Result<std::vector<PortInfo>> enumerate_ports() {
  int count = 0;
  errno = 0;
  std::unique_ptr<ibv_device*, DeviceListDeleter> list(ibv_get_device_list(&count));
  if (list == nullptr) {
    return system_error("ib: listing RDMA devices (ibv_get_device_list) failed; is the rdma-core user library "
                        "installed and the kernel's RDMA support loaded? Or set BRAID_TRANSPORT=tcp",
                        errno != 0 ? errno : ENODEV);
  }
  std::vector<PortInfo> out;
  for (int d = 0; d < count; ++d) {
    const std::string device = ibv_get_device_name(list.get()[d]);
    std::unique_ptr<ibv_context, ContextDeleter> ctx(ibv_open_device(list.get()[d]));
    if (ctx == nullptr) {
      out.push_back(unusable(device, std::string("cannot open it: ") + std::strerror(errno)));
      continue;
    }
    ibv_device_attr attr{};
    if (int rc = ibv_query_device(ctx.get(), &attr); rc != 0) {
      out.push_back(unusable(device, std::string("cannot query it: ") + std::strerror(rc)));
      continue;
    }
    std::vector<ibv_port_attr> ports(attr.phys_port_cnt);
    bool queried = true;
    for (uint8_t p = 1; p <= attr.phys_port_cnt && queried; ++p) {
      if (int rc = ibv_query_port(ctx.get(), p, &ports[p - 1]); rc != 0) {
        out.push_back(unusable(device, "cannot query port " + std::to_string(p) + ": " + std::strerror(rc)));
        queried = false;
      }
    }
    if (!queried) continue;
    std::vector<std::vector<GidInfo>> gids = read_gids(ctx.get(), device, ports);
    for (size_t p = 1; p <= ports.size(); ++p) {
      const ibv_port_attr& a = ports[p - 1];
      PortInfo info;
      info.device = device;
      info.port = static_cast<int>(p);
      info.active = a.state == IBV_PORT_ACTIVE;
      info.state_name = state_name(a.state);
      info.active_mtu_bytes = 128 << static_cast<int>(a.active_mtu);  // IBV_MTU_256 is 1
      info.ethernet = a.link_layer == IBV_LINK_LAYER_ETHERNET;
      info.lid = info.ethernet ? 0 : a.lid;
      info.gids = std::move(gids[p]);
      out.push_back(std::move(info));
    }
  }
  return out;
}

}  // namespace braid::transport::ib
