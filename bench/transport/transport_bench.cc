// bench/transport/transport_bench.cc - loopback bandwidth and latency of the tcp engines.
//
//   transport_bench [engines=tcp,tcp-poll,blocking] [min=4096] [max=268435456] [iters=20000]
//
// Two threads of one process, each owning one end (as two rank processes would own theirs).
// Bandwidth: one direction, 8 messages in flight (2 from 64 MiB), total >= 512 MiB per size.
// Latency: 8-byte ping-pong, half the mean round trip. "blocking" is the yardstick: plain
// blocking sockets with TCP_NODELAY, one send()/recv() loop per message, no framing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "transport/registry.h"

namespace {

using namespace braid;
using namespace braid::transport;
using Clock = std::chrono::steady_clock;

// Messages in flight: 8, or 2 for the largest sizes (memory).
size_t window_for(size_t size) { return size >= (size_t{64} << 20) ? 2 : 8; }
size_t total_for(size_t size) { return std::max<size_t>(size * 4, size_t{512} << 20); }

// Waits for the next completion; aborts the benchmark on failure.
Completion next(Transport& t, std::vector<Completion>& q) {
  while (q.empty()) {
    Status s = t.poll(q, std::chrono::seconds(1));
    if (!s.is_ok()) {
      std::fprintf(stderr, "poll: %s\n", s.message().c_str());
      std::exit(1);
    }
  }
  Completion c = q.front();
  q.erase(q.begin());
  if (!c.status.is_ok()) {
    std::fprintf(stderr, "transfer failed: %s\n", c.status.message().c_str());
    std::exit(1);
  }
  return c;
}

struct Pair {
  std::unique_ptr<Transport> ta, tb;
  std::unique_ptr<Connection> a, b;
};

Pair connect_pair(const std::string& engine) {
  TransportOptions o;
  o.listen_host = "127.0.0.1";
  auto env = Env::parse(process_env());
  if (env.is_ok()) o.env = env.value();
  Pair p;
  p.ta = std::move(create_transport(engine, o)).value();
  p.tb = std::move(create_transport(engine, o)).value();
  std::string addr = p.ta->listen().value();
  std::thread t([&] { p.b = std::move(p.tb->connect(addr, {1, 1, 0}, Deadline::after_seconds(10))).value(); });
  p.a = std::move(p.ta->accept({1, 0, 1}, Deadline::after_seconds(10))).value();
  t.join();
  return p;
}

double bandwidth(Pair& p, size_t size) {
  const size_t count = total_for(size) / size;
  const size_t kWindow = window_for(size);
  std::vector<char> src(size, 1), dst(size * kWindow);
  char ack = 0;
  std::thread receiver([&] {
    std::vector<Completion> q;
    size_t posted = 0;
    for (; posted < std::min(kWindow, count); ++posted) (void)p.a->post_recv(dst.data() + (posted % kWindow) * size, size, posted);
    for (size_t done = 0; done < count; ++done) {
      next(*p.ta, q);
      if (posted < count) {
        (void)p.a->post_recv(dst.data() + (posted % kWindow) * size, size, posted);
        ++posted;
      }
    }
    (void)p.a->post_send(&ack, 1, 0);
    next(*p.ta, q);
  });
  std::vector<Completion> q;
  auto start = Clock::now();
  size_t posted = 0;
  for (; posted < std::min(kWindow, count); ++posted) (void)p.b->post_send(src.data(), size, posted);
  (void)p.b->post_recv(&ack, 1, 99);
  for (size_t done = 0; done < count + 1; ++done) {
    Completion c = next(*p.tb, q);
    if (c.is_send && posted < count) {
      (void)p.b->post_send(src.data(), size, posted);
      ++posted;
    }
  }
  double s = std::chrono::duration<double>(Clock::now() - start).count();
  receiver.join();
  return static_cast<double>(count * size) / s / 1e9;
}

double latency_us(Pair& p, int iters) {
  char a[8] = {}, b[8] = {};
  std::thread echo([&] {
    std::vector<Completion> q;
    for (int i = 0; i < iters; ++i) {
      (void)p.a->post_recv(a, 8, 0);
      next(*p.ta, q);
      (void)p.a->post_send(a, 8, 1);
      next(*p.ta, q);
    }
  });
  std::vector<Completion> q;
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    (void)p.b->post_recv(b, 8, 0);
    (void)p.b->post_send(b, 8, 1);
    next(*p.tb, q);
    next(*p.tb, q);
  }
  double s = std::chrono::duration<double>(Clock::now() - start).count();
  echo.join();
  return s / iters / 2 * 1e6;
}

// --- the yardstick: plain blocking sockets
struct SocketPair {
  int a = -1, b = -1;
};

SocketPair blocking_pair() {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  listen(l, 1);
  getsockname(l, reinterpret_cast<sockaddr*>(&sa), &len);
  SocketPair p;
  p.b = socket(AF_INET, SOCK_STREAM, 0);
  connect(p.b, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  p.a = accept(l, nullptr, nullptr);
  close(l);
  int one = 1;
  setsockopt(p.a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(p.b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return p;
}

void full(ssize_t (*io)(int, void*, size_t, int), int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t k = io(fd, p, n, 0);
    if (k <= 0) std::exit(1);
    p += k;
    n -= static_cast<size_t>(k);
  }
}
ssize_t do_send(int fd, void* p, size_t n, int f) { return ::send(fd, p, n, f | MSG_NOSIGNAL); }
ssize_t do_recv(int fd, void* p, size_t n, int f) { return ::recv(fd, p, n, f); }

double blocking_bandwidth(SocketPair& p, size_t size) {
  const size_t count = total_for(size) / size;
  std::vector<char> src(size, 1), dst(size);
  char ack = 0;
  std::thread receiver([&] {
    for (size_t i = 0; i < count; ++i) full(do_recv, p.a, dst.data(), size);
    full(do_send, p.a, &ack, 1);
  });
  auto start = Clock::now();
  for (size_t i = 0; i < count; ++i) full(do_send, p.b, src.data(), size);
  full(do_recv, p.b, &ack, 1);
  double s = std::chrono::duration<double>(Clock::now() - start).count();
  receiver.join();
  return static_cast<double>(count * size) / s / 1e9;
}

double blocking_latency_us(SocketPair& p, int iters) {
  char a[8], b[8] = {};
  std::thread echo([&] {
    for (int i = 0; i < iters; ++i) {
      full(do_recv, p.a, a, 8);
      full(do_send, p.a, a, 8);
    }
  });
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) {
    full(do_send, p.b, b, 8);
    full(do_recv, p.b, b, 8);
  }
  double s = std::chrono::duration<double>(Clock::now() - start).count();
  echo.join();
  return s / iters / 2 * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  std::map<std::string, std::string> args = {
      {"engines", "tcp,tcp-poll,blocking"}, {"min", "4096"}, {"max", "268435456"}, {"iters", "20000"}};
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    size_t eq = s.find('=');
    if (eq != std::string::npos) args[s.substr(0, eq)] = s.substr(eq + 1);
  }
  size_t lo = std::stoull(args["min"]), hi = std::stoull(args["max"]);
  int iters = std::stoi(args["iters"]);
  std::stringstream engines(args["engines"]);
  for (std::string engine; std::getline(engines, engine, ',');) {
    std::printf("== %s\n", engine.c_str());
    if (engine == "blocking") {
      SocketPair p = blocking_pair();
      std::printf("latency 8 B: %.2f us (half round trip)\n", blocking_latency_us(p, iters));
      for (size_t s = lo; s <= hi; s *= 4) std::printf("bandwidth %10zu B: %6.2f GB/s\n", s, blocking_bandwidth(p, s));
      close(p.a), close(p.b);
      continue;
    }
    Pair p = connect_pair(engine);
    std::printf("transport %s\n", p.ta->name());
    std::printf("latency 8 B: %.2f us (half round trip)\n", latency_us(p, iters));
    for (size_t s = lo; s <= hi; s *= 4) std::printf("bandwidth %10zu B: %6.2f GB/s\n", s, bandwidth(p, s));
    std::fflush(stdout);
  }
  return 0;
}
