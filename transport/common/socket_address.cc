#include "transport/common/socket_address.h"

#include <arpa/inet.h>

#include <cstring>

namespace braid::transport {

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SocketAddress::set_port(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

std::string SocketAddress::host() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, buf, sizeof buf);
  } else if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, buf, sizeof buf);
  } else {
    return "?";
  }
  return buf;
}

std::string SocketAddress::to_string() const {
  std::string h = host();
  if (family() == AF_INET6) h = "[" + h + "]";
  return h + ":" + std::to_string(port());
}

Result<SocketAddress> SocketAddress::from_host(const std::string& host_in, uint16_t port) {
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  SocketAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    a.length = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    a.length = sizeof(sockaddr_in6);
  } else {
    return invalid_argument("'" + host_in + "' is not a numeric IPv4 or IPv6 address");
  }
  a.set_port(port);
  return a;
}

Result<SocketAddress> SocketAddress::parse(const std::string& text) {
  size_t colon = text.rfind(':');
  const auto bad = [&] {
    return invalid_argument("tcp address '" + text + "' is not 'host:port' or '[ipv6]:port'");
  };
  if (colon == std::string::npos || colon + 1 >= text.size()) return bad();
  std::string host = text.substr(0, colon);
  if (host.find(':') != std::string::npos && (host.front() != '[' || host.back() != ']')) return bad();
  char* end = nullptr;
  unsigned long port = std::strtoul(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port == 0 || port > 65535) return bad();
  auto a = from_host(host, static_cast<uint16_t>(port));
  if (!a.is_ok()) return bad();
  return a;
}

SocketAddress SocketAddress::from_sockaddr(const sockaddr* sa, socklen_t len) {
  SocketAddress a;
  std::memcpy(&a.storage, sa, std::min<size_t>(len, sizeof a.storage));
  a.length = len;
  return a;
}

bool SocketAddress::is_loopback() const {
  if (family() == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&storage);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

std::string peer_name(int fd) {
  SocketAddress a;
  a.length = sizeof a.storage;
  if (getpeername(fd, a.get(), &a.length) != 0) return "?";
  return a.to_string();
}

}  // namespace braid::transport
