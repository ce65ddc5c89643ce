#include "tests/transport/tcp_fuzz.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/job_secret.h"
#include "transport/common/handshake.h"
#include "transport/common/socket_address.h"
#include "transport/common/socket_setup.h"
#include "transport/registry.h"
#include "transport/tcp/wire_format.h"

namespace braid::transport::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kComm = 7;
constexpr auto kBound = 10s;  // far above what any case takes: reaching it is a hang

// Said on stdout too: a test may be capturing stderr, where the transport logs every refusal.
// The input of the case in progress, for the report.
const uint8_t* g_data = nullptr;
size_t g_size = 0;

[[noreturn]] void defect(const char* fuzzer, const std::string& what) {
  std::string hex;
  for (size_t i = 0; i < g_size && i < 4096; ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", g_data[i]);
    hex += b;
  }
  std::fprintf(stderr, "%s: DEFECT: %s\ninput (%zu bytes): %s\n", fuzzer, what.c_str(), g_size, hex.c_str());
  std::printf("%s: DEFECT: %s\ninput (%zu bytes): %s\n", fuzzer, what.c_str(), g_size, hex.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  std::abort();
}

const auth::JobSecret& job_secret() {
  static const auth::JobSecret* s = new auth::JobSecret(
      std::move(auth::JobSecret::from_text("the fuzzed job's secret, 32 bytes", "fuzz")).value());
  return *s;
}

// Rank 0 listening and rank 1 able to connect to it, per engine; never destroyed (a fuzzer's
// process ends with exit()).
struct Ranks {
  std::unique_ptr<Transport> zero, one;
  std::string address;
};

Ranks& ranks_for(size_t size) {
  static auto* all = new std::map<std::string, Ranks>();
  TransportOptions o;
  o.listen_host = "127.0.0.1";
  o.secret = job_secret();
  static const bool have_uring = create_transport("tcp", o).is_ok();  // else epoll serves both
  const std::string engine = size % 2 == 0 && have_uring ? "tcp" : "tcp-poll";
  Ranks& r = (*all)[engine];
  if (!r.zero) {
    auto zero = create_transport(engine, o);
    auto one = create_transport(engine, o);
    if (!zero.is_ok() || !one.is_ok()) defect("fuzz_tcp", "cannot create the " + engine + " transport");
    r.zero = std::move(zero).value();
    r.one = std::move(one).value();
    auto addr = r.zero->listen();
    if (!addr.is_ok()) defect("fuzz_tcp", "cannot listen: " + addr.status().message());
    r.address = addr.value();
  }
  return r;
}

// Polls `t` until `want` completions arrived, and `other` (which may have to send for it) until
// `other_want` did; a defect when that takes kBound. Returns those of `t`.
std::vector<Completion> wait_for(Transport& t, size_t want, const char* fuzzer, Transport* other = nullptr,
                                 size_t other_want = 0) {
  std::vector<Completion> got, others;
  const Deadline end = Deadline::after(kBound);
  while (got.size() < want || others.size() < other_want) {
    if (end.expired()) {
      std::string seen;
      for (const auto& c : got) seen += " [" + std::to_string(c.cookie) + ": " + c.status.message() + "]";
      defect(fuzzer, "operations did not complete within the bound (a hang); completed:" + seen);
    }
    Status st = t.poll(got, other == nullptr ? 10ms : 0ms);
    if (st.is_ok() && other != nullptr) st = other->poll(others, 0ms);
    if (!st.is_ok()) defect(fuzzer, "poll failed: " + st.message());
  }
  return got;
}

int raw_connect(const std::string& address) {
  auto to = transport::SocketAddress::parse(address);
  if (!to.is_ok()) defect("fuzz_tcp", "bad address " + address);
  auto fd = transport::connect_with_retry(to.value(), Deadline::after(kBound));
  if (!fd.is_ok()) defect("fuzz_tcp", "cannot connect: " + fd.status().message());
  return fd.value().release();
}

// Writes what the socket takes within a short while: the other end may stop reading.
void send_some(int fd, const uint8_t* data, size_t size) {
  (void)transport::write_exact(fd, data, size, Deadline::after(200ms));
}

}  // namespace

void fuzz_tcp_handshake(const uint8_t* data, size_t size) {
  constexpr const char* kName = "fuzz_tcp_handshake";
  g_data = data, g_size = size;
  Ranks& r = ranks_for(size);
  {
    UniqueFd stranger(raw_connect(r.address));
    send_some(stranger.get(), data, size);
  }  // and hangs up: what it sent is all rank 0 will get from it

  Result<std::unique_ptr<Connection>> connected = Status(ErrorCode::internal, "connect did not run");
  std::thread one([&] { connected = r.one->connect(r.address, PeerIdentity{kComm, 1, 0}, Deadline::after(kBound)); });
  auto accepted = r.zero->accept(PeerIdentity{kComm, 0, 1}, Deadline::after(kBound));
  one.join();
  if (!accepted.is_ok()) defect(kName, "rank 0 did not admit rank 1: " + accepted.status().message());
  if (!connected.is_ok()) defect(kName, "rank 1 could not connect: " + connected.status().message());
  // What rank 1 sends reaches rank 0: its connection is the one rank 0 holds.
  uint64_t sent = 0x0123456789abcdefull ^ size, got = 0;
  if (!accepted.value()->post_recv(&got, sizeof got, 1).is_ok() ||
      !connected.value()->post_send(&sent, sizeof sent, 2).is_ok()) {
    defect(kName, "cannot post");
  }
  for (const Completion& c : wait_for(*r.zero, 1, kName, r.one.get(), 1)) {
    if (!c.status.is_ok() || got != sent) defect(kName, "rank 0 did not receive rank 1's message: " + c.status.message());
  }
}

void fuzz_tcp_frames(const uint8_t* data, size_t size) {
  constexpr const char* kName = "fuzz_tcp_frames";
  size = std::min<size_t>(size, 64 << 10);  // a receive per frame it could hold stays < kMaxInFlight
  g_data = data, g_size = size;
  Ranks& r = ranks_for(size);
  UniqueFd peer(raw_connect(r.address));
  std::thread writer([&] {
    transport::Handshake hello;
    hello.comm_id = kComm, hello.from_rank = 1, hello.to_rank = 0;
    auto shook = transport::connector_handshake(peer.get(), hello, job_secret(), Deadline::after(kBound));
    if (!shook.is_ok()) defect(kName, "the real handshake failed: " + shook.status().message());
    send_some(peer.get(), data, size);
    ::shutdown(peer.get(), SHUT_WR);
  });
  auto accepted = r.zero->accept(PeerIdentity{kComm, 0, 1}, Deadline::after(kBound));
  if (!accepted.is_ok()) defect(kName, "rank 0 did not admit rank 1: " + accepted.status().message());
  Connection& c = *accepted.value();

  // Receives of several sizes, each with guard bytes behind it that nothing may touch; then
  // one for every frame the bytes could hold, so that no frame waits for a receive that is
  // not posted (a socket carries messages in order: every receive then ends, at the latest
  // when the bytes do).
  constexpr size_t kGuard = 64;
  constexpr unsigned char kGuardByte = 0xA5;
  std::vector<size_t> capacities = {0, 64, 4096, 70001};
  capacities.resize(capacities.size() + size / tcp::kFrameHeaderBytes + 1, 64);
  std::vector<std::vector<unsigned char>> buffers;
  for (size_t i = 0; i < capacities.size(); ++i) {
    buffers.emplace_back(capacities[i] + kGuard, kGuardByte);
    if (!c.post_recv(buffers[i].data(), capacities[i], i).is_ok()) defect(kName, "cannot post a receive");
  }
  for (const Completion& done : wait_for(*r.zero, capacities.size(), kName)) {
    const ErrorCode code = done.status.code();
    if (code != ErrorCode::ok && code != ErrorCode::protocol && code != ErrorCode::peer_lost) {
      defect(kName, "a receive ended with " + std::string(to_string(code)) + ": " + done.status.message());
    }
    if (done.is_send || done.cookie >= capacities.size()) defect(kName, "a completion nobody posted");
    if (code == ErrorCode::ok && done.bytes > capacities[done.cookie]) {
      defect(kName, "a receive reports more bytes than its buffer holds");
    }
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    for (size_t k = capacities[i]; k < buffers[i].size(); ++k) {
      if (buffers[i][k] != kGuardByte) defect(kName, "bytes landed behind receive " + std::to_string(i) + "'s buffer");
    }
  }
  accepted.value()->close();  // the writer, if still sending, fails now
  writer.join();
}

}  // namespace braid::transport::testing
