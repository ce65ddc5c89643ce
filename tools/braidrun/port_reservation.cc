#include "tools/braidrun/port_reservation.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace braid::braidrun {
namespace {

// Binds `fd` (of `family`) to the wildcard address, port 0; returns the port, or 0 and errno.
uint16_t bind_any(int fd, int family) {
  const int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) return 0;
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (family == AF_INET6) {
    const int zero = 0;  // dual stack: the IPv4 port is held too
    if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) != 0) return 0;
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    len = sizeof *a;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) return 0;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  return ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                  : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

}  // namespace

Result<std::unique_ptr<PortReservation>> PortReservation::any_free() {
  int err = 0;
  for (int family : {AF_INET6, AF_INET}) {
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    uint16_t port = bind_any(fd, family);
    if (port != 0) return std::unique_ptr<PortReservation>(new PortReservation(fd, port));
    err = errno;
    close(fd);
  }
  return system_error("braidrun: cannot reserve a free port for torch's store (MASTER_PORT)", err);
}

PortReservation::~PortReservation() { close(fd_); }

}  // namespace braid::braidrun
