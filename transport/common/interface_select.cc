#include "transport/common/interface_select.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <sstream>

namespace braid::transport {

bool ifname_matches(const std::string& spec_in, const std::string& ifname) {
  std::string spec = spec_in;
  if (spec.empty()) return true;
  bool exclude = false;
  bool exact = false;
  if (spec.front() == '^') {
    exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec.front() == '=') {
    exact = true;
    spec.erase(0, 1);
  }
  bool listed = false;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if (exact ? ifname == item : ifname.compare(0, item.size(), item) == 0) listed = true;
  }
  return exclude ? !listed : listed;
}

std::vector<LocalInterface> list_interfaces() {
  std::vector<LocalInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || !(a->ifa_flags & IFF_UP)) continue;
    int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr)) continue;  // would need a scope id in the address
    }
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    out.push_back({a->ifa_name, SocketAddress::from_sockaddr(a->ifa_addr, len), (a->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  return out;
}

namespace {

// The local address the kernel would use to reach `host`: a UDP connect sends nothing.
std::string source_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string found;
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    SocketAddress local;
    local.length = sizeof local.storage;
    if (getsockname(fd, local.get(), &local.length) == 0) found = local.host();
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return found;
}

}  // namespace

Result<LocalInterface> choose_interface(const std::string& spec, const std::string& master_addr,
                                        const std::vector<LocalInterface>& interfaces) {
  if (!spec.empty()) {
    for (int family : {AF_INET, AF_INET6}) {
      for (const auto& i : interfaces) {
        if (i.address.family() == family && ifname_matches(spec, i.name)) return i;
      }
    }
    std::string seen;
    for (const auto& i : interfaces) seen += (seen.empty() ? "" : ", ") + i.name;
    return invalid_argument("BRAID_SOCKET_IFNAME='" + spec + "' matches no up interface with an address (seen: " +
                            (seen.empty() ? "none" : seen) + ")");
  }
  if (!master_addr.empty()) {
    std::string src = source_address_towards(master_addr);
    for (const auto& i : interfaces) {
      if (!src.empty() && i.address.host() == src) return i;
    }
  }
  for (int family : {AF_INET, AF_INET6}) {
    for (const auto& i : interfaces) {
      if (!i.loopback && i.address.family() == family) return i;
    }
  }
  for (const auto& i : interfaces) {
    if (i.loopback && i.address.family() == AF_INET) return i;
  }
  if (!interfaces.empty()) return interfaces.front();
  return invalid_argument("no network interface is up; set BRAID_SOCKET_IFNAME");
}

}  // namespace braid::transport
