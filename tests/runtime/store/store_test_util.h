// tests/runtime/store/store_test_util.h - raw sockets to a store server, for tests that must
// send bytes no TcpStore would: connect, do (or skip) the handshake, send, read until close.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include "common/job_secret.h"
#include "runtime/store/socket_util.h"
#include "runtime/store/store_handshake.h"
#include "runtime/store/store_protocol.h"

namespace braid::store_test {


// A blocking TCP connection to 127.0.0.1:port (invalid when connect fails).
inline UniqueFd connect_raw(uint16_t port, const char* ip = "127.0.0.1") {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return UniqueFd();
  return fd;
}

inline bool send_raw(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// One whole frame's body, or "" when the connection ends or `limit` passes first.
inline bool read_frame_raw(int fd, std::string* body, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  auto end = std::chrono::steady_clock::now() + limit;
  std::string got;
  while (std::chrono::steady_clock::now() < end) {
    if (got.size() >= 4 && got.size() >= 4 + store::decode_u32(got.data())) {
      *body = got.substr(4, store::decode_u32(got.data()));
      return true;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    char c;  // byte by byte: never read past the frame
    if (::recv(fd, &c, 1, 0) != 1) return false;
    got.push_back(c);
  }
  return false;
}

// Everything the server sends until it closes the connection, or until `limit` passes.
inline std::string read_until_eof(int fd, std::chrono::milliseconds limit, bool* closed) {
  std::string got;
  auto end = std::chrono::steady_clock::now() + limit;
  *closed = false;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) {
      *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(r));
  }
  return got;
}

// Sends a 64 MiB frame's length and then all of its body but the last byte, as fast as the
// server takes it, until the server closes the connection.
inline void send_almost_a_huge_frame(int fd) {
  constexpr uint32_t kLen = 64u << 20;
  std::string header(4, '\0');
  for (int i = 0; i < 4; ++i) header[static_cast<size_t>(i)] = static_cast<char>((kLen >> (8 * i)) & 0xff);
  if (!send_raw(fd, header)) return;
  std::string chunk(1 << 20, 'A');
  for (size_t left = kLen - 1; left > 0;) {
    size_t n = std::min(left, chunk.size());
    if (!send_raw(fd, chunk.substr(0, n))) return;
    left -= n;
  }
}

// A raw connection that completed the handshake with `secret` (none when empty) and `job_id`:
// what follows are plain request frames. Invalid when the server refused it.
inline UniqueFd connect_authenticated(uint16_t port, const std::string& secret = "", const std::string& job_id = "") {
  UniqueFd fd = connect_raw(port);
  if (!fd.valid()) return fd;
  auth::JobSecret s = secret.empty() ? auth::JobSecret() : auth::JobSecret::from_text(secret, "test").value();
  store::ClientHandshake hs(s, job_id, "127.0.0.1:" + std::to_string(port), port);
  std::string hello, verdict;
  if (!read_frame_raw(fd.get(), &hello)) return UniqueFd();
  auto answer = hs.on_hello(hello);
  if (!answer.is_ok() || !send_raw(fd.get(), answer.value())) return UniqueFd();
  if (!read_frame_raw(fd.get(), &verdict) || !hs.on_verdict(verdict).is_ok()) return UniqueFd();
  return fd;
}

// Raises this process's soft open-file limit to the hard one; returns the new soft limit.
inline rlim_t raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

// VmRSS of process `pid` in bytes (0 when it cannot be read).
inline size_t rss_bytes(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

}  // namespace braid::store_test
