#include "tools/braidrun/etcd_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "common/unique_fd.h"

namespace braid::braidrun::etcd {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Connects to one of `ep`'s addresses before `deadline`; the socket stays non-blocking.
Result<UniqueFd> connect_to(const Endpoint& ep, const Deadline& deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* raw = nullptr;
  const std::string port = std::to_string(ep.port);
  if (int rc = getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &raw); rc != 0) {
    return peer_lost("etcd member " + ep.text() + ": cannot resolve '" + ep.host + "': " + gai_strerror(rc));
  }
  AddrInfoPtr res(raw);
  std::string last = "no address";
  for (addrinfo* a = res.get(); a; a = a->ai_next) {
    UniqueFd fd(socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) {
      last = std::string("socket: ") + strerror(errno);
      continue;
    }
    if (connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS) {
      last = std::string("connect: ") + strerror(errno);
      continue;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    int n = poll(&p, 1, deadline.remaining_ms());
    if (n == 0) return timeout_error("etcd member " + ep.text() + ": connect did not complete in time");
    int err = 0;
    socklen_t len = sizeof err;
    if (n < 0 || getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == 0) return fd;
    last = std::string("connect: ") + strerror(err);
  }
  return peer_lost("etcd member " + ep.text() + ": " + last);
}

Status send_all(int fd, const std::string& bytes, const Endpoint& ep, const Deadline& deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return peer_lost("etcd member " + ep.text() + ": send: " + strerror(errno));
    }
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, deadline.remaining_ms()) == 0) {
      return timeout_error("etcd member " + ep.text() + ": the request could not be sent in time");
    }
  }
  return Status::ok();
}

// Reads until the peer closes (the request said "Connection: close"), bounded in time and size.
Result<std::string> read_to_close(int fd, const Endpoint& ep, const Deadline& deadline) {
  std::string in;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
      if (in.size() > kMaxHttpReplyBytes + 65536) {
        return protocol_error("etcd member " + ep.text() + ": reply larger than " +
                              std::to_string(kMaxHttpReplyBytes) + " bytes");
      }
      continue;
    }
    if (n == 0) return in;
    if (errno != EAGAIN && errno != EINTR) return peer_lost("etcd member " + ep.text() + ": recv: " + strerror(errno));
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, deadline.remaining_ms()) == 0) {
      return timeout_error("etcd member " + ep.text() + ": no complete reply in time (a stopped or overloaded member?)");
    }
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

// The body of a "Transfer-Encoding: chunked" reply: hex size line, data, CRLF, ... 0.
Result<std::string> dechunk(const std::string& raw, const Endpoint& ep) {
  std::string body;
  size_t at = 0;
  for (;;) {
    size_t eol = raw.find("\r\n", at);
    if (eol == std::string::npos) return protocol_error("etcd member " + ep.text() + ": truncated chunked reply");
    size_t size = 0;
    try {
      size = std::stoul(raw.substr(at, eol - at), nullptr, 16);
    } catch (const std::exception&) {
      return protocol_error("etcd member " + ep.text() + ": bad chunk size in its reply");
    }
    at = eol + 2;
    if (size == 0) return body;
    if (size > raw.size() - at) return protocol_error("etcd member " + ep.text() + ": truncated chunk in its reply");
    body.append(raw, at, size);
    at += size + 2;
  }
}

}  // namespace

Result<HttpReply> parse_http_reply(const std::string& raw, const Endpoint& ep) {
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || head_end == std::string::npos) {
    std::string got = "the connection closed without one";
    if (!raw.empty()) got = "it began '" + raw.substr(0, 40) + "'";
    return protocol_error("etcd member " + ep.text() + ": the reply is not HTTP (" + got + "); is this etcd's client port?");
  }
  HttpReply reply;
  const size_t sp = raw.find(' ');
  reply.status = sp == std::string::npos ? 0 : std::atoi(raw.c_str() + sp + 1);
  const std::string head = lower(raw.substr(0, head_end));
  std::string body = raw.substr(head_end + 4);
  if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    ASSIGN_OR_RETURN(reply.body, dechunk(body, ep));
    return reply;
  }
  if (size_t cl = head.find("\r\ncontent-length:"); cl != std::string::npos) {
    const size_t want = std::strtoull(head.c_str() + cl + 17, nullptr, 10);
    if (body.size() < want) return protocol_error("etcd member " + ep.text() + ": the reply ended early");
    body.resize(want);
  }
  reply.body = std::move(body);
  return reply;
}

std::string Endpoint::text() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Result<std::vector<Endpoint>> parse_endpoints(const std::string& list) {
  std::vector<Endpoint> out;
  size_t from = 0;
  for (;;) {
    const size_t comma = list.find(',', from);
    std::string part = list.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    if (part.rfind("https://", 0) == 0) {
      return invalid_argument("etcd endpoint '" + part + "': https is not supported; give the members' plain " +
                              "http client URLs (host:port)");
    }
    if (part.rfind("http://", 0) == 0) part = part.substr(7);
    if (!part.empty() && part.back() == '/') part.pop_back();
    Endpoint ep;
    std::string port;
    if (!part.empty() && part.front() == '[') {
      const size_t close = part.find(']');
      if (close == std::string::npos) return invalid_argument("etcd endpoint '" + part + "': missing ']'");
      ep.host = part.substr(1, close - 1);
      if (close + 1 < part.size()) {
        if (part[close + 1] != ':') return invalid_argument("etcd endpoint '" + part + "': expected ':' after ']'");
        port = part.substr(close + 2);
      }
    } else if (const size_t colon = part.rfind(':'); colon != std::string::npos) {
      ep.host = part.substr(0, colon);
      port = part.substr(colon + 1);
    } else {
      ep.host = part;
    }
    if (ep.host.empty()) return invalid_argument("etcd endpoint '" + part + "' has no host; expected host:port");
    if (!port.empty()) {
      char* end = nullptr;
      const long p = std::strtol(port.c_str(), &end, 10);
      if (*end != '\0' || p < 1 || p > 65535) {
        return invalid_argument("etcd endpoint '" + part + "': port '" + port + "' is not in 1..65535");
      }
      ep.port = static_cast<uint16_t>(p);
    }
    out.push_back(std::move(ep));
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

std::string endpoints_text(const std::vector<Endpoint>& endpoints) {
  std::string s;
  for (const Endpoint& e : endpoints) {
    if (!s.empty()) s += ',';
    s += e.text();
  }
  return s;
}

Result<HttpReply> http_post(const Endpoint& endpoint, const std::string& path, const std::string& body,
                            const Deadline& deadline) {
  ASSIGN_OR_RETURN(UniqueFd fd, connect_to(endpoint, deadline));
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: " + endpoint.text() +
                              "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                              "\r\nConnection: close\r\n\r\n" + body;
  RETURN_IF_ERROR(send_all(fd.get(), request, endpoint, deadline));
  ASSIGN_OR_RETURN(std::string raw, read_to_close(fd.get(), endpoint, deadline));
  return parse_http_reply(raw, endpoint);
}

Result<std::string> local_address_towards(const Endpoint& endpoint, const Deadline& deadline) {
  ASSIGN_OR_RETURN(UniqueFd fd, connect_to(endpoint, deadline));
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return system_error("getsockname on the connection to etcd member " + endpoint.text(), errno);
  }
  char host[INET6_ADDRSTRLEN] = {};
  const void* addr = ss.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                                              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
  if (inet_ntop(ss.ss_family, addr, host, sizeof host) == nullptr) {
    return system_error("inet_ntop on the connection to etcd member " + endpoint.text(), errno);
  }
  return std::string(host);
}

}  // namespace braid::braidrun::etcd
