// bench/transport/transport_peer_bench.cc - one end of a two-process tcp transport benchmark.
//
//   transport_peer_bench --role server|client --addr A --port P
//                        --engine tcp|tcp-poll|socket|socket-framed --mode bw|lat
//                        [--size N] [--seconds S] [--iters I] [--window W] [--work K]
//
// Unlike transport_bench (two threads, one process, loopback only), the two ends are separate
// processes so they can sit in different network namespaces (bench/transport_netns.sh). The
// server listens on A:P (the port is pinned through Env::port_lo/port_hi, so the client knows the
// address without an exchange channel; connect() retries until the server listens).
//   bw:  the client streams N-byte messages for S seconds, a few in flight (W, or by size: 8
//        below 4 MiB, 4 below 64 MiB, then 2; the server posts as many receives), then a 1-byte end
//        marker; the server reports GB/s = payload bytes / s / 1e9 between the first and the last
//        arrival (the receiver's view, like iperf3's "receiver" line).
//   lat: 8-byte ping-pong; the client reports the median of RTT/2 over the iterations.
// "socket" is the yardstick: blocking send/recv with TCP_NODELAY, no framing (bw ends at EOF).
// "socket-framed" (lat only) is braid's floor on a CPU shared by both ends: the blocking socket
// with braid's wire format and the system calls of transport/tcp/shared_cpu_path.h, nothing else
// (see FramedSocket). --work K adds K turns of an empty loop (3 instructions each) to every
// message it sends, on both ends: user-space work of a known size, which measures what each
// instruction braid's bookkeeping adds costs the one-CPU ping-pong (bench/lat_budget.sh).
// Output: one line "RESULT role=.. engine=.. mode=.. size=.. gbps=.. | lat_us=.." per process.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "transport/registry.h"
#include "transport/tcp/shared_cpu_path.h"
#include "transport/tcp/wire_format.h"

namespace {

using namespace braid;
using namespace braid::transport;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kCommId = 0x7e57;
constexpr unsigned char kStop = 0xff;  // first byte of the ping that ends a latency run
constexpr double kSlackSeconds = 60;   // every wait is bounded by the run length plus this

struct Args {
  std::string role, addr = "127.0.0.1", engine = "tcp", mode = "bw";
  int port = 0;
  size_t size = 1 << 20;
  double seconds = 2;
  int iters = 20000;
  size_t window = 0;  // messages in flight (bw); 0: by size (window_for)
  int work = 0;       // socket-framed: empty-loop turns per message sent
};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "transport_peer_bench: %s\n", what.c_str());
  std::exit(1);
}

// A few messages in flight keep the pipe full without pinning too much memory for big messages.
size_t window_for(const Args& a) {
  if (a.window > 0) return a.window;
  return a.size >= (size_t{64} << 20) ? 2 : a.size >= (size_t{4} << 20) ? 4 : 8;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void print_result(const Args& a, const std::string& tail) {
  std::printf("RESULT role=%s engine=%s mode=%s size=%zu %s\n", a.role.c_str(), a.engine.c_str(), a.mode.c_str(),
              a.size, tail.c_str());
}

// ---------------------------------------------------------------- the braid transport

class Peer {
 public:
  explicit Peer(const Args& a) : args_(a), deadline_(Deadline::after_seconds(a.seconds + kSlackSeconds)) {
    TransportOptions o;
    auto env = Env::parse(process_env());
    if (!env.is_ok()) die(env.status().message());
    o.env = env.value();
    o.listen_host = a.addr;
    o.env.port_lo = o.env.port_hi = static_cast<uint16_t>(a.port);
    auto t = create_transport(a.engine, o);
    if (!t.is_ok()) die(t.status().message());
    transport_ = std::move(t).value();
    Result<std::unique_ptr<Connection>> c = invalid_argument("unset");
    if (a.role == "server") {
      auto addr = transport_->listen();
      if (!addr.is_ok()) die(addr.status().message());
      std::fprintf(stderr, "%s listening on %s\n", transport_->name(), addr.value().c_str());
      c = transport_->accept({kCommId, 0, 1}, Deadline::after_seconds(kSlackSeconds));
    } else {
      c = transport_->connect(a.addr + ":" + std::to_string(a.port), {kCommId, 1, 0},
                              Deadline::after_seconds(kSlackSeconds));
    }
    if (!c.is_ok()) die(c.status().message());
    conn_ = std::move(c).value();
  }

  Connection& conn() { return *conn_; }

  // The next finished operation; a failed one ends the benchmark. The list polled into is
  // reused: allocating one per poll cost ~0.2 us a message, charged to the transport against the
  // blocking-socket yardstick, which allocates nothing.
  Completion next() {
    while (next_ == done_.size()) poll_once();
    Completion c = std::move(done_[next_++]);
    check(c);
    return c;
  }

  // Waits for `n` completions and only checks them: the latency loops' harness, so that what
  // they time is the transport, not moving completions around.
  void wait_for(int n) {
    while (n > 0) {
      poll_once();
      for (const Completion& c : done_) check(c);
      n -= static_cast<int>(done_.size());
    }
    done_.clear();
    next_ = 0;
  }

  void post_send(const void* p, size_t n, uint64_t cookie) {
    Status s = conn_->post_send(p, n, cookie);
    if (!s.is_ok()) die("post_send: " + s.message());
  }
  void post_recv(void* p, size_t n, uint64_t cookie) {
    Status s = conn_->post_recv(p, n, cookie);
    if (!s.is_ok()) die("post_recv: " + s.message());
  }

 private:
  // One poll into the reused list (done_ then holds what it returned, from next_ = 0).
  void poll_once() {
    done_.clear();
    next_ = 0;
    Status s = transport_->poll(done_, std::chrono::milliseconds(100));
    if (!s.is_ok()) die("poll: " + s.message());
    if (done_.empty() && deadline_.expired()) die("no completion before the deadline (peer gone?)");
  }
  static void check(const Completion& c) {
    if (!c.status.is_ok()) die(std::string(c.is_send ? "send" : "recv") + " failed: " + c.status.message());
  }

  Args args_;
  Deadline deadline_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Connection> conn_;
  std::vector<Completion> done_;
  size_t next_ = 0;  // done_[next_] is the next completion to hand out
};

void transport_bw_server(const Args& a, Peer& p) {
  const size_t window = window_for(a);
  std::vector<char> dst(a.size * window);
  for (size_t i = 0; i < window; ++i) p.post_recv(dst.data() + i * a.size, a.size, i);
  size_t messages = 0;
  Clock::time_point first{}, last{};
  for (;;) {
    Completion c = p.next();
    if (c.is_send) continue;
    if (c.bytes != a.size) break;  // the 1-byte end marker
    last = Clock::now();
    if (messages++ == 0) first = last;
    p.post_recv(dst.data() + c.cookie * a.size, a.size, c.cookie);
  }
  char ack = 1;
  p.post_send(&ack, 1, 0);
  while (!p.next().is_send) {
  }
  double s = std::chrono::duration<double>(last - first).count();
  double bytes = static_cast<double>(messages > 1 ? messages - 1 : 0) * static_cast<double>(a.size);
  char tail[160];
  std::snprintf(tail, sizeof tail, "gbps=%.4f messages=%zu seconds=%.3f", s > 0 ? bytes / s / 1e9 : 0.0, messages, s);
  print_result(a, tail);
}

void transport_bw_client(const Args& a, Peer& p) {
  const size_t window = window_for(a);
  std::vector<char> src(a.size, 1);
  char ack = 0, end = 0;
  p.post_recv(&ack, 1, ~uint64_t{0});
  auto start = Clock::now();
  size_t in_flight = 0, sent = 0;
  for (; in_flight < window; ++in_flight) p.post_send(src.data(), a.size, 0);
  while (in_flight > 0) {
    Completion c = p.next();
    if (!c.is_send) die("unexpected message from the server during the stream");
    --in_flight;
    ++sent;
    if (seconds_since(start) < a.seconds) {
      p.post_send(src.data(), a.size, 0);
      ++in_flight;
    }
  }
  double s = seconds_since(start);
  p.post_send(&end, 1, 1);
  for (int done = 0; done < 2; ++done) p.next();  // the marker's send and the server's ack
  char tail[160];
  std::snprintf(tail, sizeof tail, "gbps=%.4f messages=%zu seconds=%.3f (sender)",
                static_cast<double>(sent * a.size) / s / 1e9, sent, s);
  print_result(a, tail);
}

void transport_lat_server(Peer& p) {
  unsigned char buf[8];
  for (;;) {
    p.post_recv(buf, 8, 0);
    p.wait_for(1);
    p.post_send(buf, 8, 1);
    p.wait_for(1);
    if (buf[0] == kStop) return;
  }
}

// ---------------------------------------------------------------- blocking sockets

void io_all(bool send, int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = send ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k <= 0) die(std::string(send ? "send" : "recv") + " on the blocking socket: " + (k == 0 ? "peer closed" : std::strerror(errno)));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

int socket_connect(const Args& a) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(a.port));
  if (inet_pton(AF_INET, a.addr.c_str(), &sa.sin_addr) != 1) die("--addr must be an IPv4 address: " + a.addr);
  // Bounded wait on both ends: a missing peer ends the run instead of blocking forever.
  timeval tv{static_cast<time_t>(a.seconds + kSlackSeconds), 0};
  int one = 1;
  if (a.role == "server") {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (bind(l, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(l, 1) != 0)
      die("cannot listen on " + a.addr + ":" + std::to_string(a.port) + ": " + std::strerror(errno));
    int fd = accept(l, nullptr, nullptr);
    if (fd < 0) die(std::string("accept: ") + std::strerror(errno));
    close(l);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  }
  auto until = Clock::now() + std::chrono::seconds(static_cast<int>(kSlackSeconds));
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      return fd;
    }
    int err = errno;
    close(fd);
    if (Clock::now() > until) die("cannot connect to " + a.addr + ":" + std::to_string(a.port) + ": " + std::strerror(err));
    usleep(20000);  // the server is not listening yet
  }
}

void socket_bw_server(const Args& a, int fd) {
  std::vector<char> dst(a.size);
  size_t bytes = 0, first_bytes = 0;
  Clock::time_point first{}, last{};
  for (;;) {
    ssize_t k = ::recv(fd, dst.data(), dst.size(), 0);
    if (k < 0) die(std::string("recv: ") + std::strerror(errno));
    if (k == 0) break;  // the client's shutdown(SHUT_WR): end of the stream
    last = Clock::now();
    if (bytes == 0) first = last, first_bytes = static_cast<size_t>(k);
    bytes += static_cast<size_t>(k);
  }
  char ack = 1;
  io_all(true, fd, &ack, 1);
  double s = std::chrono::duration<double>(last - first).count();
  char tail[160];
  std::snprintf(tail, sizeof tail, "gbps=%.4f bytes=%zu seconds=%.3f",
                s > 0 ? static_cast<double>(bytes - first_bytes) / s / 1e9 : 0.0, bytes, s);
  print_result(a, tail);
}

void socket_bw_client(const Args& a, int fd) {
  std::vector<char> src(a.size, 1);
  auto start = Clock::now();
  size_t sent = 0;
  while (seconds_since(start) < a.seconds) {
    io_all(true, fd, src.data(), a.size);
    ++sent;
  }
  double s = seconds_since(start);
  shutdown(fd, SHUT_WR);
  char ack;
  io_all(false, fd, &ack, 1);
  char tail[160];
  std::snprintf(tail, sizeof tail, "gbps=%.4f messages=%zu seconds=%.3f (sender)",
                static_cast<double>(sent * a.size) / s / 1e9, sent, s);
  print_result(a, tail);
}

// What the engines do per message on the shared-CPU path, without their bookkeeping (posting,
// matching, completion lists, the poll layers): one send(MSG_DONTWAIT) of a frame header and the
// payload gathered, one recv() that may sleep into an 8 KiB inbox bounded by the path's
// SO_RCVTIMEO slice, the header checked, the payload copied out. Messages of up to 64 bytes.
class FramedSocket {
 public:
  FramedSocket(int fd, double seconds, int work)
      : fd_(fd), work_(work), deadline_(Deadline::after_seconds(seconds + kSlackSeconds)) {
    const auto slice = std::chrono::microseconds(tcp::SharedCpuPath::kSlice);
    timeval tv{0, static_cast<suseconds_t>(slice.count())};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  void send(const unsigned char* p, size_t n) {
    for (int i = 0; i < work_; ++i) asm volatile("" ::: "memory");  // kept: the compiler may not drop it
    tcp::FrameHeader h;
    h.slice_len = static_cast<uint32_t>(n);
    h.seq = send_seq_++;
    h.total_len = n;
    unsigned char buf[tcp::kFrameHeaderBytes + kMaxPayload];
    std::memcpy(buf, &h, sizeof h);
    std::memcpy(buf + sizeof h, p, n);
    if (::send(fd_, buf, sizeof h + n, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof h + n)) {
      die(std::string("framed send: ") + std::strerror(errno));
    }
  }
  void recv(unsigned char* p, size_t n) {
    size_t got = 0;
    while (got < tcp::kFrameHeaderBytes + n) {
      ssize_t k = ::recv(fd_, inbox_ + got, sizeof inbox_ - got, 0);
      if (k > 0) {
        got += static_cast<size_t>(k);
      } else if (k == 0 || errno != EAGAIN || deadline_.expired()) {
        die(std::string("framed recv: ") + (k == 0 ? "peer closed" : std::strerror(errno)));
      }
    }
    const tcp::FrameHeader h = tcp::decode_frame(inbox_);
    if (h.magic != tcp::kFrameMagic || h.seq != recv_seq_++ || h.slice_len != n) die("framed recv: a bad frame");
    std::memcpy(p, inbox_ + tcp::kFrameHeaderBytes, n);
  }
  static constexpr size_t kMaxPayload = 64;

 private:
  int fd_;
  int work_;
  Deadline deadline_;
  uint64_t send_seq_ = 0, recv_seq_ = 0;
  unsigned char inbox_[8192];
};

// ---------------------------------------------------------------- latency client (all kinds)

// One round trip of 8 bytes; `stop` tells the server it was the last.
template <typename RoundTrip>
void lat_client(const Args& a, RoundTrip&& round_trip) {
  constexpr int kWarmup = 200;
  std::vector<double> half_rtt_us;
  half_rtt_us.reserve(static_cast<size_t>(a.iters));
  for (int i = 0; i < kWarmup; ++i) round_trip(false);
  auto start = Clock::now();
  while (static_cast<int>(half_rtt_us.size()) < a.iters && seconds_since(start) < a.seconds) {
    auto t = Clock::now();
    round_trip(false);
    half_rtt_us.push_back(seconds_since(t) * 1e6 / 2);
  }
  round_trip(true);
  std::vector<double> v = half_rtt_us;
  auto pct = [&](double q) {
    size_t k = static_cast<size_t>(q * static_cast<double>(v.size() - 1));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  };
  char tail[160];
  std::snprintf(tail, sizeof tail, "lat_us=%.2f p99_us=%.2f iters=%zu", pct(0.5), pct(0.99), v.size());
  print_result(a, tail);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--role") a.role = v;
    else if (k == "--addr") a.addr = v;
    else if (k == "--port") a.port = std::stoi(v);
    else if (k == "--engine") a.engine = v;
    else if (k == "--mode") a.mode = v;
    else if (k == "--size") a.size = std::stoull(v);
    else if (k == "--seconds") a.seconds = std::stod(v);
    else if (k == "--iters") a.iters = std::stoi(v);
    else if (k == "--window") a.window = std::stoull(v);
    else if (k == "--work") a.work = std::stoi(v);
    else die("unknown option " + k);
  }
  if ((a.role != "server" && a.role != "client") || a.port <= 0 || a.port > 65535 || (a.mode != "bw" && a.mode != "lat"))
    die("usage: --role server|client --addr A --port P --engine tcp|tcp-poll|socket|socket-framed --mode bw|lat "
        "[--size N] [--seconds S] [--iters I] [--window W] [--work K]");
  if (a.mode == "lat") a.size = 8;
  if (a.engine == "socket-framed" && a.mode != "lat") die("--engine socket-framed measures latency only (--mode lat)");
  if (a.work < 0 || (a.work > 0 && a.engine != "socket-framed")) die("--work is for --engine socket-framed, and >= 0");
  if (a.size < 8) die("--size must be at least 8 (1 byte is the end marker)");
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Args a = parse(argc, argv);
  const bool server = a.role == "server";
  if (a.engine == "socket-framed") {
    FramedSocket framed(socket_connect(a), a.seconds, a.work);
    unsigned char buf[8] = {};
    if (server) {
      do {
        framed.recv(buf, 8);
        framed.send(buf, 8);
      } while (buf[0] != kStop);
    } else {
      lat_client(a, [&](bool stop) {
        buf[0] = stop ? kStop : 0;
        framed.send(buf, 8);
        framed.recv(buf, 8);
      });
    }
    return 0;
  }
  if (a.engine == "socket") {
    int fd = socket_connect(a);
    if (a.mode == "bw") {
      server ? socket_bw_server(a, fd) : socket_bw_client(a, fd);
    } else if (server) {
      unsigned char buf[8];
      do {
        io_all(false, fd, buf, 8);
        io_all(true, fd, buf, 8);
      } while (buf[0] != kStop);
    } else {
      unsigned char buf[8] = {};
      lat_client(a, [&](bool stop) {
        buf[0] = stop ? kStop : 0;
        io_all(true, fd, buf, 8);
        io_all(false, fd, buf, 8);
      });
    }
    close(fd);
    return 0;
  }
  Peer p(a);
  if (a.mode == "bw") {
    server ? transport_bw_server(a, p) : transport_bw_client(a, p);
  } else if (server) {
    transport_lat_server(p);
  } else {
    unsigned char out[8] = {}, in[8] = {};
    lat_client(a, [&](bool stop) {
      out[0] = stop ? kStop : 0;
      p.post_recv(in, 8, 0);
      p.post_send(out, 8, 1);
      p.wait_for(2);
    });
  }
  return 0;
}
