#include "transport/ib/wc_failure_context.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>


namespace braid::transport::ib {

namespace {
constexpr auto kGrace = std::chrono::milliseconds(1000);
}  // namespace

bool peer_socket_ended(int fd, std::chrono::milliseconds grace) {
  if (fd < 0) return false;
  const auto until = std::chrono::steady_clock::now() + grace;
  for (;;) {
    unsigned char b = 0;
    const ssize_t n = ::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    if (n > 0) return false;  // a goodbye (or bytes of one): the peer closed on purpose
    if (errno == ECONNRESET || errno == EPIPE) return true;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    (void)::poll(&p, 1, static_cast<int>(left.count()));
  }
}

std::string port_not_active_note(const Device& dev) {
  ibv_port_attr pa{};
  if (ibv_query_port(dev.context(), static_cast<uint8_t>(dev.port().port), &pa) != 0) {
    return dev.where() + " cannot be queried now: the device is gone?";
  }
  if (pa.state == IBV_PORT_ACTIVE) return "";
  // The names ibv_devinfo and the port list of port_choice.h use.
  const char* state = pa.state == IBV_PORT_DOWN ? "DOWN"
                      : pa.state == IBV_PORT_INIT ? "INIT"
                      : pa.state == IBV_PORT_ARMED ? "ARMED"
                                                    : "not ACTIVE";
  return dev.where() + " is " + state +
         " now: its link went down; check its cable or network interface with ibv_devinfo or ip link";
}

void explain_wc_failure(int socket_fd, const Device& dev, int peer_rank, ErrorCode& code, std::string& cause) {
  const std::string port = port_not_active_note(dev);
  if (!port.empty()) {
    cause += " (" + port + ")";
    return;
  }
  if (code != ErrorCode::peer_lost && peer_socket_ended(socket_fd, kGrace)) {
    code = ErrorCode::peer_lost;
    cause = "rank " + std::to_string(peer_rank) + " exited or was killed (its bootstrap connection ended without a " +
            "goodbye; its log says why); the NIC then reported: " + cause;
  } else if (code == ErrorCode::peer_lost && peer_socket_ended(socket_fd, std::chrono::milliseconds(0))) {
    cause = "rank " + std::to_string(peer_rank) + " exited or was killed (its bootstrap connection ended); " + cause;
  }
}

}  // namespace braid::transport::ib
