// TcpStoreServer: one thread, one epoll set, non-blocking sockets.
//
// Each connection has its own input and output buffers, so a client that sends half a frame,
// stops reading its replies or sends garbage only ever holds up itself. What the keys mean lives
// in StoreState; this file only moves bytes.
//
// Epoll is level-triggered and a connection's interest follows its state: EPOLLIN while we are
// willing to buffer more of its input, EPOLLOUT while replies are queued. Connections are named
// by id, not pointer, so one closed while handling an event batch is simply not found later.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <deque>
#include <memory>
#include <thread>
#include <unordered_map>

#include "braid/store.h"
#include "common/log.h"
#include "runtime/store/socket_util.h"
#include "runtime/store/store_protocol.h"
#include "runtime/store/store_state.h"

namespace braid {

using store::StoreState;
using store::UniqueFd;

namespace {

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr size_t kReadChunk = 64 << 10;
// Read at most this much from one connection per event, so a fast sender cannot starve others.
constexpr size_t kReadPerEvent = 1 << 20;
// Stop reading from a client whose replies pile up unread (it is not reading them).
constexpr size_t kMaxQueuedOutput = 16 << 20;
// After an oversize frame: how long we keep draining a client so our error reply reaches it
// before the close (closing with unread input would reset the connection and lose the reply).
constexpr auto kLinger = std::chrono::seconds(1);
// When accept fails for lack of file descriptors, pause accepting instead of spinning.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
constexpr size_t kMaxWarnedBadClients = 5;

struct Connection {
  UniqueFd fd;
  std::string in;
  size_t in_off = 0;
  std::string out;
  size_t out_off = 0;
  uint32_t events = 0;
  bool dead = false;
  bool dirty = false;     // has output to flush at the end of this loop turn
  bool closing = false;   // sent a fatal error: flush, shut down writing, drain, close
  bool parked = false;    // stopped parsing input (a pending wait, or too much unread output)
  Clock::time_point linger_until{};
  size_t pending_in() const { return in.size() - in_off; }
  size_t pending_out() const { return out.size() - out_off; }
};

}  // namespace

struct TcpStoreServer::Impl {
  std::string host;
  uint16_t port = 0;
  std::string address;
  UniqueFd listen_fd;
  UniqueFd epoll_fd;
  UniqueFd wake_fd;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<size_t> num_clients{0};

  // Server-thread state.
  StoreState state;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns;
  uint64_t next_id = 2;
  std::vector<uint64_t> dirty;       // connections with output to flush
  std::deque<uint64_t> runnable;     // connections whose wait ended with input still buffered
  std::vector<uint64_t> lingering;   // closing connections, drained until their deadline
  std::vector<uint64_t> dead;        // closed this loop turn, freed at its end
  std::vector<char> scratch;         // recv lands here, then is appended to a connection's input
  size_t bad_clients = 0;
  bool accept_paused = false;
  Clock::time_point accept_resume{};

  ~Impl() { shutdown(); }
  void shutdown() {
    if (!thread.joinable()) return;
    stop.store(true);
    uint64_t one = 1;
    // eventfd writes of 8 bytes cannot be short; a failure leaves nothing better to do.
    (void)!::write(wake_fd.get(), &one, sizeof(one));
    thread.join();
  }

  void run();
  int epoll_timeout_ms(Clock::time_point now) const;
  void accept_all();
  void on_event(uint64_t id, uint32_t ev);
  void read_from(Connection& c, uint64_t id);
  void process(Connection& c, uint64_t id);
  void deliver(std::vector<StoreState::Reply>& replies);
  void flush(Connection& c, uint64_t id);
  void update_interest(Connection& c, uint64_t id);
  void fail_connection(Connection& c, uint64_t id, const std::string& message);
  void mark_dead(Connection& c, uint64_t id);
  // A parked connection may parse again (its wait ended, or its output drained): queue it.
  void resume(Connection& c, uint64_t id) {
    if (!c.parked) return;
    c.parked = false;
    runnable.push_back(id);
  }
  void reap();
  Connection* find(uint64_t id) {
    auto it = conns.find(id);
    return it == conns.end() || it->second->dead ? nullptr : it->second.get();
  }
};

void TcpStoreServer::Impl::run() {
  std::vector<epoll_event> events(256);
  scratch.resize(kReadChunk);
  std::vector<StoreState::Reply> replies;
  while (!stop.load(std::memory_order_relaxed)) {
    int n = epoll_wait(epoll_fd.get(), events.data(), static_cast<int>(events.size()), epoll_timeout_ms(Clock::now()));
    if (n < 0 && errno != EINTR) {
      BRAID_LOG(warn) << "store server at " << address << ": epoll_wait failed (errno " << errno << "), stopping";
      return;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t id = events[i].data.u64;
      if (id == kWakeId) continue;  // only ever written to stop us
      if (id == kListenId) {
        accept_all();
        continue;
      }
      on_event(id, events[i].events);
    }
    auto now = Clock::now();
    replies.clear();
    state.expire(now, replies);
    deliver(replies);
    while (!runnable.empty()) {
      uint64_t id = runnable.front();
      runnable.pop_front();
      if (Connection* c = find(id)) process(*c, id);
    }
    if (accept_paused && now >= accept_resume) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenId;
      if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, listen_fd.get(), &ev) == 0) accept_paused = false;
    }
    for (uint64_t id : dirty) {
      if (Connection* c = find(id)) {
        c->dirty = false;
        flush(*c, id);
      }
    }
    dirty.clear();
    reap();
  }
}

int TcpStoreServer::Impl::epoll_timeout_ms(Clock::time_point now) const {
  if (!runnable.empty()) return 0;
  std::optional<Clock::time_point> next = state.next_deadline();
  auto consider = [&](Clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  if (accept_paused) consider(accept_resume);
  for (uint64_t id : lingering) {
    auto it = conns.find(id);
    if (it != conns.end()) consider(it->second->linger_until);
  }
  if (!next) return -1;
  if (*next <= now) return 0;
  // Round up: waking a little late is fine, waking early just loops once more.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
  return ms > (1 << 30) ? (1 << 30) : static_cast<int>(ms);
}

void TcpStoreServer::Impl::accept_all() {
  for (;;) {
    int fd = accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        BRAID_LOG(warn) << "store server at " << address << ": cannot accept more clients (errno " << errno
                        << "; " << conns.size() << " connected); raise the open-file limit (ulimit -n)";
        epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, listen_fd.get(), nullptr);
        accept_paused = true;
        accept_resume = Clock::now() + kAcceptBackoff;
      }
      return;  // EAGAIN: none left
    }
    store::set_no_delay(fd);
    uint64_t id = next_id++;
    auto c = std::make_unique<Connection>();
    c->fd = UniqueFd(fd);
    c->events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c->events;
    ev.data.u64 = id;
    if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev) != 0) continue;  // c closes fd
    conns.emplace(id, std::move(c));
    num_clients.fetch_add(1, std::memory_order_relaxed);
  }
}

void TcpStoreServer::Impl::on_event(uint64_t id, uint32_t ev) {
  Connection* c = find(id);
  if (c == nullptr) return;
  if (ev & EPOLLOUT) flush(*c, id);
  if (c->dead) return;
  if (ev & EPOLLIN) {
    read_from(*c, id);
  } else if (ev & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
    // Not reading right now (back-pressure), and the peer is gone or done sending: the protocol
    // has no half-close, so there is nothing left to answer.
    mark_dead(*c, id);
  }
}

void TcpStoreServer::Impl::read_from(Connection& c, uint64_t id) {
  size_t total = 0;
  while (total < kReadPerEvent) {
    ssize_t r = ::recv(c.fd.get(), scratch.data(), scratch.size(), 0);
    if (c.closing) {  // draining only: discard
      if (r > 0) {
        total += static_cast<size_t>(r);
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
      return mark_dead(c, id);
    }
    if (r > 0) c.in.append(scratch.data(), static_cast<size_t>(r));
    if (r == 0) return mark_dead(c, id);  // the client closed, possibly mid-frame: forget it
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return mark_dead(c, id);
    }
    total += static_cast<size_t>(r);
    if (static_cast<size_t>(r) < kReadChunk) break;
  }
  process(c, id);
}

void TcpStoreServer::Impl::process(Connection& c, uint64_t id) {
  std::vector<StoreState::Reply> replies;
  while (!c.dead && !c.closing && !state.waiting(id) && c.pending_out() < kMaxQueuedOutput) {
    if (c.pending_in() < store::kFrameHeaderBytes) break;
    uint32_t len = store::decode_u32(c.in.data() + c.in_off);
    if (len > store::kMaxFrameBytes) {
      fail_connection(c, id,
                      "frame of " + std::to_string(len) + " bytes exceeds the store's limit of " +
                          std::to_string(store::kMaxFrameBytes) +
                          " bytes; closing this connection (is this client speaking the braid store protocol?)");
      break;
    }
    if (c.pending_in() < store::kFrameHeaderBytes + len) break;
    std::string_view body(c.in.data() + c.in_off + store::kFrameHeaderBytes, len);
    c.in_off += store::kFrameHeaderBytes + len;
    state.handle(id, body, Clock::now(), replies);
    deliver(replies);
    replies.clear();
  }
  c.parked = !c.dead && !c.closing && c.pending_in() >= store::kFrameHeaderBytes &&
             (state.waiting(id) || c.pending_out() >= kMaxQueuedOutput);
  // Drop consumed bytes once they dominate, so a long-lived connection's buffer stays small.
  if (c.in_off > 0 && c.in_off * 2 >= c.in.size()) {
    c.in.erase(0, c.in_off);
    c.in_off = 0;
  }
  if (!c.dead) update_interest(c, id);
}

void TcpStoreServer::Impl::deliver(std::vector<StoreState::Reply>& replies) {
  for (auto& r : replies) {
    Connection* c = find(r.conn);
    if (c == nullptr) continue;
    c->out.append(r.frame);
    if (!c->dirty) {
      c->dirty = true;
      dirty.push_back(r.conn);
    }
    resume(*c, r.conn);
  }
}

void TcpStoreServer::Impl::flush(Connection& c, uint64_t id) {
  while (c.pending_out() > 0) {
    ssize_t w = ::send(c.fd.get(), c.out.data() + c.out_off, c.pending_out(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return mark_dead(c, id);  // reset or gone: the client cannot get its replies anyway
    }
    c.out_off += static_cast<size_t>(w);
  }
  if (c.pending_out() == 0) {
    c.out.clear();
    c.out_off = 0;
    if (c.closing) ::shutdown(c.fd.get(), SHUT_WR);
  }
  if (c.pending_out() < kMaxQueuedOutput) resume(c, id);
  if (!c.dead) update_interest(c, id);
}

void TcpStoreServer::Impl::update_interest(Connection& c, uint64_t id) {
  bool want_in = c.closing || (c.pending_out() < kMaxQueuedOutput &&
                               c.pending_in() < store::kMaxFrameBytes + store::kFrameHeaderBytes + kReadChunk);
  uint32_t events = EPOLLRDHUP | (want_in ? EPOLLIN : 0u) | (c.pending_out() > 0 ? EPOLLOUT : 0u);
  if (events == c.events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) != 0) return mark_dead(c, id);
  c.events = events;
}

void TcpStoreServer::Impl::fail_connection(Connection& c, uint64_t id, const std::string& message) {
  // Warn about the first few only: a port scanner or a flood must not flood the log too.
  if (++bad_clients <= kMaxWarnedBadClients) {
    BRAID_LOG(warn) << "store server at " << address << ": " << message
                    << (bad_clients == kMaxWarnedBadClients ? " (further such clients are logged at INFO)" : "");
  } else {
    BRAID_LOG(info) << "store server at " << address << ": " << message;
  }
  c.out.append(store::FrameWriter()
                   .u8(static_cast<uint8_t>(store::ReplyKind::error))
                   .u8(static_cast<uint8_t>(ErrorCode::protocol))
                   .bytes(message)
                   .finish());
  c.closing = true;
  c.linger_until = Clock::now() + kLinger;
  c.in.clear();
  c.in_off = 0;
  state.drop(id);
  lingering.push_back(id);
  if (!c.dirty) {
    c.dirty = true;
    dirty.push_back(id);
  }
}

void TcpStoreServer::Impl::mark_dead(Connection& c, uint64_t id) {
  if (c.dead) return;
  c.dead = true;
  state.drop(id);
  epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  dead.push_back(id);
}

void TcpStoreServer::Impl::reap() {
  auto now = Clock::now();
  std::erase_if(lingering, [&](uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return true;
    if (now >= it->second->linger_until) mark_dead(*it->second, id);
    return it->second->dead;
  });
  for (uint64_t id : dead) {
    if (conns.erase(id) != 0) num_clients.fetch_sub(1, std::memory_order_relaxed);
  }
  dead.clear();
}

// ---- public API ----

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStoreServer::~TcpStoreServer() = default;  // Impl's destructor stops the thread; fds close after

uint16_t TcpStoreServer::port() const { return impl_->port; }
std::string TcpStoreServer::address() const { return impl_->address; }
size_t TcpStoreServer::num_clients() const { return impl_->num_clients.load(std::memory_order_relaxed); }

namespace {

Status add_to_epoll(int epfd, int fd, uint64_t id) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = id;
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) return system_error("store server: epoll_ctl", errno);
  return Status::ok();
}

Result<std::unique_ptr<TcpStoreServer::Impl>> start_impl(const std::string& host, uint16_t port) {
  auto impl = std::make_unique<TcpStoreServer::Impl>();
  impl->host = host;
  ASSIGN_OR_RETURN(impl->listen_fd, store::listen_tcp(host, port, &impl->port));
  impl->address = store::format_address(host.empty() ? "0.0.0.0" : host, impl->port);
  impl->epoll_fd = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!impl->epoll_fd.valid()) return system_error("store server: epoll_create1", errno);
  impl->wake_fd = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl->wake_fd.valid()) return system_error("store server: eventfd", errno);
  RETURN_IF_ERROR(add_to_epoll(impl->epoll_fd.get(), impl->listen_fd.get(), kListenId));
  RETURN_IF_ERROR(add_to_epoll(impl->epoll_fd.get(), impl->wake_fd.get(), kWakeId));
  return impl;
}

}  // namespace

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const std::string& host, uint16_t port) {
  auto impl = value_or_raise(start_impl(host, port));
  Impl* raw = impl.get();
  raw->thread = std::thread([raw] { raw->run(); });
  BRAID_LOG(info) << "store server listening on " << raw->address;
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

}  // namespace braid
