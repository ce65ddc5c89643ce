// transport/common/interface_select.h - which local address the tcp transport listens on.
//
// BRAID_SOCKET_IFNAME works like NCCL_SOCKET_IFNAME: a comma-separated list of interface name
// prefixes ("eth,ib"); a leading '^' turns it into a list of exclusions ("^docker,lo"); a '='
// after that makes the names exact instead of prefixes ("=eth0", "^=docker0").
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "transport/common/socket_address.h"

namespace braid::transport {

// Pure: does interface `ifname` pass the filter `spec`? An empty spec passes every name.
bool ifname_matches(const std::string& spec, const std::string& ifname);

struct LocalInterface {
  std::string name;      // "eth0"
  SocketAddress address; // port 0
  bool loopback = false;
};

// Every up interface with an IPv4 or IPv6 address (link-local IPv6 left out), in system order.
std::vector<LocalInterface> list_interfaces();

// Picks the address to listen on. With `spec`, the first interface passing it (IPv4 first).
// Without: the interface that routes to `master_addr` (when it is set), else the first up
// non-loopback interface, else loopback. Fails naming the interfaces it saw.
Result<LocalInterface> choose_interface(const std::string& spec, const std::string& master_addr,
                                        const std::vector<LocalInterface>& interfaces);

}  // namespace braid::transport
