#include "transport/common/socket_setup.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

namespace braid::transport {

namespace {

Status set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return system_error("fcntl(O_NONBLOCK)", errno);
  return Status::ok();
}

// Waits for `events` on fd until the deadline; false on timeout.
Result<bool> wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, deadline.remaining_ms(1000));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return system_error("poll", errno);
    if (deadline.expired()) return false;
  }
}

long read_sysctl(const char* path) {
  std::ifstream f(path);
  long v = 0;
  f >> v;
  return v;
}

}  // namespace

Result<UniqueFd> listen_on(const SocketAddress& bind_to, uint16_t port_lo, uint16_t port_hi) {
  int last_err = 0;
  for (uint32_t port = port_lo; port <= port_hi; ++port) {
    UniqueFd fd(socket(bind_to.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) return system_error("socket", errno);
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    SocketAddress a = bind_to;
    a.set_port(static_cast<uint16_t>(port));
    if (bind(fd.get(), a.get(), a.length) == 0 && ::listen(fd.get(), 512) == 0) return fd;
    last_err = errno;
  }
  std::string range = port_lo == 0 ? "any port" : "ports " + std::to_string(port_lo) + "-" + std::to_string(port_hi);
  return system_error("cannot listen on " + bind_to.host() + " (" + range + "; see BRAID_PORT_RANGE)", last_err);
}

Result<UniqueFd> connect_with_retry(const SocketAddress& to, Deadline deadline) {
  auto backoff = std::chrono::milliseconds(5);
  int last_err = 0;
  for (;;) {
    UniqueFd fd(socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) return system_error("socket", errno);
    int rc = ::connect(fd.get(), to.get(), to.length);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      ASSIGN_OR_RETURN(bool ready, wait_for(fd.get(), POLLOUT, deadline));
      socklen_t len = sizeof err;
      if (!ready) err = ETIMEDOUT;
      else getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) return fd;
    last_err = err;
    // Refused/unreachable: the peer is probably not listening yet; anything else is final.
    bool retry = err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
                 err == ECONNRESET || err == EAGAIN;
    if (!retry || deadline.expired()) break;
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  return Status(deadline.expired() ? ErrorCode::timeout : ErrorCode::system,
                "cannot connect to " + to.to_string() + ": " + std::strerror(last_err) +
                    (deadline.expired() ? " (gave up at the deadline; is the peer running and reachable? "
                                          "check BRAID_SOCKET_IFNAME and firewalls)"
                                        : ""));
}

Result<UniqueFd> accept_one(int listen_fd, int timeout_ms) {
  ASSIGN_OR_RETURN(bool ready, wait_for(listen_fd, POLLIN, Deadline::after(std::chrono::milliseconds(timeout_ms))));
  if (!ready) return UniqueFd();
  UniqueFd fd(accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (fd.get() < 0 && errno != EAGAIN && errno != ECONNABORTED && errno != EINTR) return system_error("accept", errno);
  return fd;
}

Status write_exact(int fd, const void* data, size_t bytes, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return system_error("send to " + peer_name(fd), errno);
    ASSIGN_OR_RETURN(bool ready, wait_for(fd, POLLOUT, deadline));
    if (!ready) return timeout_error("timed out sending to " + peer_name(fd));
  }
  return Status::ok();
}

Status read_exact(int fd, void* data, size_t bytes, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return peer_lost("connection closed before the handshake was complete");
    if (errno != EAGAIN && errno != EINTR) return system_error("recv", errno);
    ASSIGN_OR_RETURN(bool ready, wait_for(fd, POLLIN, deadline));
    if (!ready) return timeout_error("nothing (or too little) received within the handshake timeout");
  }
  return Status::ok();
}

Status check_magic_and_version(const Handshake& h) {
  if (h.magic != kHandshakeMagic) return protocol_error("not a braid handshake (bad magic)");
  if (h.version != kProtocolVersion) {
    return protocol_error("braid protocol version " + std::to_string(h.version) + ", this build speaks " +
                          std::to_string(kProtocolVersion) + " (mixed braid versions?)");
  }
  return Status::ok();
}

Result<Handshake> read_handshake(int fd, Deadline deadline) {
  unsigned char buf[kHandshakeBytes] = {};
  RETURN_IF_ERROR(read_exact(fd, buf, kHandshakePrefixBytes, deadline));
  RETURN_IF_ERROR(check_magic_and_version(decode_handshake(buf)));
  RETURN_IF_ERROR(read_exact(fd, buf + kHandshakePrefixBytes, kHandshakeBytes - kHandshakePrefixBytes, deadline));
  return decode_handshake(buf);
}

Status check_handshake(const Handshake& h, uint64_t comm_id, int self_rank) {
  RETURN_IF_ERROR(check_magic_and_version(h));
  if (h.comm_id != comm_id) {
    return protocol_error("communicator id " + std::to_string(h.comm_id) + " is not ours (" + std::to_string(comm_id) +
                          "): another job or communicator?");
  }
  if (h.to_rank != self_rank) {
    return protocol_error("meant for rank " + std::to_string(h.to_rank) + ", this is rank " + std::to_string(self_rank));
  }
  if (h.from_rank == self_rank) {
    return protocol_error("sent by rank " + std::to_string(h.from_rank) +
                          ", this rank itself: a rank never connects to itself (two ranks with the same RANK?)");
  }
  if (h.from_rank < 0) return protocol_error("sent by rank " + std::to_string(h.from_rank) + ", which cannot be");
  if (h.nsocks < 1 || h.nsocks > kMaxSockets || h.socket_index >= h.nsocks) {
    return protocol_error("bad socket index " + std::to_string(h.socket_index) + " of " + std::to_string(h.nsocks));
  }
  return Status::ok();
}

// Loopback carries no network whose congestion a TCP congestion control could follow: all one
// costs there is its work per acknowledgement and, for a pacing one (bbr, this VM's default), a
// rate limit, which holds a loopback stream well below what reno moves (docs/performance.md,
// BRAID_LOOPBACK_CC, has the figures and their commands).
// Across a network the host's default stays unless BRAID_NETWORK_CC names one: the network is
// the administrator's, and which control keeps a ring's flows at the link rate depends on its
// queues (docs/performance.md, "Both ends of every link shaped", compares them in one run).
Status set_congestion_control(int fd, const Env& env) {
  if (env.loopback_cc == "system" && env.network_cc == "system") return Status::ok();
  // Our own end says it as well as the peer's (a loopback address talks only to loopback), and
  // stays readable after a peer that already gave up has closed its end.
  sockaddr_storage self{};
  socklen_t len = sizeof self;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) != 0) return system_error("getsockname", errno);
  const bool loopback = SocketAddress::from_sockaddr(reinterpret_cast<const sockaddr*>(&self), len).is_loopback();
  const std::string& cc = loopback ? env.loopback_cc : env.network_cc;
  const char* name = loopback ? "BRAID_LOOPBACK_CC" : "BRAID_NETWORK_CC";
  if (cc == "system") return Status::ok();
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc.data(), static_cast<socklen_t>(cc.size())) == 0) return Status::ok();
  const int err = errno;
  std::string allowed;
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_allowed_congestion_control"), allowed);
  return Status(ErrorCode::invalid_argument,
                std::string(name) + "=" + cc + ": the kernel refused this congestion control for a " +
                    (loopback ? "loopback" : "network") + " socket (" + std::strerror(err) + "; allowed here: " +
                    (allowed.empty() ? "unknown" : allowed) + "); set " + name + "=system to keep the kernel's default");
}

Status tune_data_socket(int fd, const Env& env) {
  RETURN_IF_ERROR(set_nonblocking(fd));
  int one = 1;
  // Frames are small and latency-bound; Nagle would hold a header back for up to 40 ms.
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return system_error("TCP_NODELAY", errno);
  RETURN_IF_ERROR(set_congestion_control(fd, env));
  // Setting SO_SNDBUF/SO_RCVBUF turns the kernel's autotuning off and is capped by
  // net.core.{w,r}mem_max (often 208 KiB, far below what autotuning reaches). So the buffers are
  // pinned to kBuffer only where the cap allows it; elsewhere autotuning does better.
  constexpr int kBuffer = 4 << 20;
  if (read_sysctl("/proc/sys/net/core/wmem_max") >= kBuffer) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kBuffer, sizeof kBuffer);
  if (read_sysctl("/proc/sys/net/core/rmem_max") >= kBuffer) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kBuffer, sizeof kBuffer);
  // Silent peer (cable pulled, host frozen): unacknowledged data is abandoned after
  // TCP_USER_TIMEOUT, and an idle connection is probed by keepalive, which with a user timeout
  // set gives up once that much time passed without an answer.
  double t = env.peer_timeout_s;
  unsigned user_timeout_ms = static_cast<unsigned>(std::min(t * 1000.0, 4.0e9));
  int idle = std::max(1, static_cast<int>(t / 3));
  int interval = std::max(1, static_cast<int>(t / 6));
  int count = 3;
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms) != 0) {
    return system_error("setting keepalive/TCP_USER_TIMEOUT", errno);
  }
  return Status::ok();
}

}  // namespace braid::transport
