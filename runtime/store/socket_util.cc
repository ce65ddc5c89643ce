#include "runtime/store/socket_util.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace braid::store {

std::string format_address(const std::string& host, uint16_t port) {
  bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string printable_key(std::string_view key) {
  constexpr size_t kMaxShown = 80;
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kMaxShown; ++i) {
    auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  if (key.size() > kMaxShown) out += "...(" + std::to_string(key.size()) + " bytes)";
  return out + "'";
}

std::string printable_keys(const std::vector<std::string>& keys, size_t limit) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < limit; ++i) {
    if (i > 0) out += ", ";
    out += printable_key(keys[i]);
  }
  if (keys.size() > limit) out += " (and " + std::to_string(keys.size() - limit) + " more)";
  return out;
}

Result<AddrInfoPtr> resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::string service = std::to_string(port);
  // Brackets are how users write IPv6 literals next to a port; getaddrinfo wants them bare.
  std::string bare = host;
  if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') bare = bare.substr(1, bare.size() - 2);
  addrinfo* res = nullptr;
  int rc = getaddrinfo(bare.empty() ? nullptr : bare.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    return Status(ErrorCode::invalid_argument,
                  "cannot resolve " + format_address(host, port) + ": " + gai_strerror(rc));
  }
  return AddrInfoPtr(res);
}

Result<UniqueFd> listen_tcp(const std::string& host, uint16_t port, uint16_t* bound_port) {
  std::string where = store::format_address(host.empty() ? "*" : host, port);
  ASSIGN_OR_RETURN(store::AddrInfoPtr addrs, store::resolve(host, port, /*passive=*/true));
  Status last = Status(ErrorCode::system, "no usable address for " + where);
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last = system_error("store server: socket() for " + where, errno);
      continue;
    }
    // Lets a restarted job bind the port its predecessor left in TIME_WAIT.
    int one = 1;
    (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      int err = errno;
      if (err == EADDRINUSE) {
        return Status(ErrorCode::system,
                      "store server cannot listen on " + where +
                          ": address already in use; another store (an earlier job, braidrun or rank 0?) or "
                          "program holds that port: pick another MASTER_PORT, or pass port 0 for a free one");
      }
      last = system_error("store server cannot bind " + where, err);
      continue;
    }
    if (::listen(fd.get(), 4096) != 0) {
      last = system_error("store server cannot listen on " + where, errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      last = system_error("store server: getsockname on " + where, errno);
      continue;
    }
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
  }
  return last;
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (fd < 0 || getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "unknown peer";
  }
  return format_address(host, static_cast<uint16_t>(std::atoi(port)));
}

void set_no_delay(int fd) {
  int one = 1;
  // Failing only costs latency, never correctness: ignore the result.
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace braid::store
