// transport/common/socket_address.h - IPv4/IPv6 socket addresses as the strings braid publishes.
//
// Published form: "10.0.0.2:41234" or "[fd00::2]:41234" (brackets around IPv6, as in URLs).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace braid::transport {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t port);
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  std::string host() const;      // "10.0.0.2", "fd00::2"
  std::string to_string() const;  // "10.0.0.2:41234", "[fd00::2]:41234"

  // Parses a numeric host ("127.0.0.1", "::1", "[::1]") and port.
  static Result<SocketAddress> from_host(const std::string& host, uint16_t port);
  // Parses the published form "host:port" / "[host]:port".
  static Result<SocketAddress> parse(const std::string& text);
  static SocketAddress from_sockaddr(const sockaddr* sa, socklen_t len);
  // 127.0.0.0/8, ::1 or ::ffff:127.x.y.z.
  bool is_loopback() const;
};

// The local and remote addresses of a connected socket, for messages.
std::string peer_name(int fd);

}  // namespace braid::transport
