#include "tests/runtime/store/store_fuzz.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "braid/store.h"
#include "common/job_secret.h"
#include "runtime/store/store_handshake.h"
#include "runtime/store/store_protocol.h"
#include "tests/runtime/store/store_test_util.h"

namespace braid::store_test {
namespace {

using namespace std::chrono_literals;

const std::string kSecret = "fuzzing-secret-0123456789abcdef";
const std::string kJob = "fuzz-job";

[[noreturn]] void defect(const char* what) {
  std::fprintf(stderr, "store fuzz: %s\n", what);
  std::fflush(stderr);
  __builtin_trap();
}

void check(bool ok, const char* what) {
  if (!ok) defect(what);
}

struct Target {
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<TcpStore> good;
  auth::JobSecret secret;
  uint64_t round = 0;
};

Target& target() {
  static Target* t = [] {
    auto* t = new Target();
    t->server = TcpStoreServer::start(
        "127.0.0.1", 0, {.secret = kSecret, .job_id = kJob, .max_frame_bytes = 64 << 10, .handshake_timeout = 2s});
    t->good = TcpStore::connect("127.0.0.1", t->server->port(), {.timeout = 5s, .secret = kSecret, .job_id = kJob});
    t->secret = auth::JobSecret::from_text(kSecret, "fuzz").value();
    return t;
  }();
  return *t;
}

// Sends as much of `bytes` as the server takes within a bound: a server that stops reading (its
// one-frame input limit, a parked wait) is applying back-pressure, not failing.
void send_bounded(int fd, std::string_view bytes) {
  auto end = std::chrono::steady_clock::now() + 2s;
  while (!bytes.empty() && std::chrono::steady_clock::now() < end) {
    ssize_t w = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      bytes.remove_prefix(static_cast<size_t>(w));
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 20);
    } else {
      return;  // closed by the server: fine
    }
  }
}

// Everything the server sent until it closed; a server that keeps the connection open past the
// bound after the client stopped sending is a hang.
std::string drain_until_closed(int fd) {
  shutdown(fd, SHUT_WR);
  bool closed = false;
  std::string got = read_until_eof(fd, 5s, &closed);
  check(closed, "the server kept a connection open after its client stopped sending");
  return got;
}

// Every byte is part of a whole frame whose body is a reply of a known kind; with
// `errors_only`, each is an error reply. With `cut_tail_ok`, the last reply may be cut short:
// a client that stops sending gets what fit into its socket before the server closed.
void check_replies(std::string_view got, bool errors_only, bool cut_tail_ok = false) {
  while (!got.empty()) {
    if (cut_tail_ok && (got.size() < 4 || got.size() < 4 + size_t{store::decode_u32(got.data())})) return;
    check(got.size() >= 4, "a reply cut inside its length");
    uint32_t len = store::decode_u32(got.data());
    check(len >= 1 && got.size() >= 4 + size_t{len}, "a reply cut short, or empty");
    auto kind = static_cast<uint8_t>(got[4]);
    check(kind <= static_cast<uint8_t>(store::ReplyKind::error), "a reply of unknown kind");
    if (errors_only) check(kind == static_cast<uint8_t>(store::ReplyKind::error), "a stranger got a non-error reply");
    got.remove_prefix(4 + len);
  }
}

void check_still_serving(Target& t) {
  const std::string key = "fuzz/good/" + std::to_string(++t.round);
  try {
    t.good->set(key, key);
    check(t.good->get(key) == key, "the good client read back something else");
    check(t.good->delete_key(key), "the good client's key vanished");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store fuzz: %s\n", e.what());
    defect("the server no longer serves a good client");
  }
}

}  // namespace

void fuzz_store_handshake(const uint8_t* data, size_t size) {
  Target& t = target();
  std::string_view bytes(reinterpret_cast<const char*>(data), size);

  // The parsers alone: none may accept what no one with the secret made.
  store::ClientHandshake client(t.secret, kJob, "fuzz", 1);
  if (client.on_hello(bytes).is_ok()) check(!client.on_verdict(bytes).is_ok(), "a forged verdict was accepted");
  store::ServerHandshake server(t.secret, kJob, 1);
  store::ServerHandshake::Verdict v = server.on_answer(bytes, "fuzz");
  check(!v.status.is_ok(), "a forged answer was accepted");
  check_replies(v.frame, /*errors_only=*/true);

  // The real server, given the bytes where the answer belongs.
  UniqueFd fd = connect_raw(t.server->port());
  check(fd.valid(), "cannot connect to the server");
  std::string hello;
  check(read_frame_raw(fd.get(), &hello), "no hello from the server");
  send_bounded(fd.get(), bytes);
  check_replies(drain_until_closed(fd.get()), /*errors_only=*/true);
  check_still_serving(t);
}

void fuzz_store_frames(const uint8_t* data, size_t size) {
  Target& t = target();
  UniqueFd fd = connect_authenticated(t.server->port(), kSecret, kJob);
  check(fd.valid(), "a good handshake was refused");
  send_bounded(fd.get(), std::string_view(reinterpret_cast<const char*>(data), size));
  check_replies(drain_until_closed(fd.get()), /*errors_only=*/false, /*cut_tail_ok=*/true);
  check_still_serving(t);
}

}  // namespace braid::store_test
