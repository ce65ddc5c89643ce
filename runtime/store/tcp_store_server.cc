// TcpStoreServer: one thread, one epoll set, non-blocking sockets.
//
// Each connection has its own input and output buffers, so a client that sends half a frame,
// stops reading its replies or sends garbage only ever holds up itself. What the keys mean lives
// in StoreState; who may talk to it is decided in tcp_store_server_admit.cc; this file moves
// bytes.
//
// Epoll is level-triggered and a connection's interest follows its state: EPOLLIN while we are
// willing to buffer more of its input (at most one whole frame), EPOLLOUT while replies are
// queued. Connections are named by id, not pointer, so one closed while handling an event batch
// is simply not found later.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/env.h"
#include "common/log.h"
#include "runtime/store/store_protocol.h"
#include "runtime/store/tcp_store_server_impl.h"

namespace braid {

using store::StoreState;
using namespace store_server;

namespace {

// After a fatal error: how long we keep draining a client so our error reply reaches it before
// the close (closing with unread input would reset the connection and lose the reply).
constexpr auto kLinger = std::chrono::seconds(1);

void give_back_if_large(std::string& buf) {
  if (buf.empty() && buf.capacity() > kKeepCapacity) std::string().swap(buf);
}

}  // namespace

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
    expire_pending(now);
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
  if (auto t = next_pending_deadline()) consider(*t);
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
    // Never more than one whole frame is buffered (a handshake's, for a pending connection):
    // the bytes of a frame that is too long are never read, let alone kept.
    size_t room = c.closing ? scratch.size() : std::min(scratch.size(), input_limit(c) - std::min(input_limit(c), c.pending_in()));
    if (room == 0) break;
    ssize_t r = ::recv(c.fd.get(), scratch.data(), room, 0);
    if (c.closing) {  // draining only: discard
      if (r > 0) {
        total += static_cast<size_t>(r);
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (r == 0) flush(c, id);  // the client is done sending: our error reply may still reach it
      return mark_dead(c, id);
    }
    if (r > 0) c.in.append(scratch.data(), static_cast<size_t>(r));
    if (r == 0) {
      // The client closed, possibly mid-frame: forget it. One that never finished its
      // handshake counts as a failed connection.
      if (c.pending()) note_bad_client("client " + c.peer + " closed before finishing its handshake", /*quiet=*/true);
      process(c, id);  // what it sent before closing is still answered, as far as it fits
      if (!c.dead) flush(c, id);
      return mark_dead(c, id);
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return mark_dead(c, id);
    }
    total += static_cast<size_t>(r);
    if (static_cast<size_t>(r) < room) break;
  }
  process(c, id);
}

void TcpStoreServer::Impl::process(Connection& c, uint64_t id) {
  if (c.pending() && !admit(c, id)) {
    if (!c.dead) update_interest(c, id);
    return;
  }
  std::vector<StoreState::Reply> replies;
  while (!c.dead && !c.closing && !state.waiting(id) && c.pending_out() < kMaxQueuedOutput) {
    if (c.pending_in() < store::kFrameHeaderBytes) break;
    uint32_t len = store::decode_u32(c.in.data() + c.in_off);
    if (len > fixed.max_frame_bytes) {
      std::string message = "a request of " + std::to_string(len) + " bytes exceeds the store's limit of " +
                            std::to_string(fixed.max_frame_bytes) +
                            " bytes (BRAID_STORE_MAX_FRAME_BYTES); closing this connection";
      fail_connection(c, id, "client " + c.peer + ": " + message,
                      store::FrameWriter()
                          .u8(static_cast<uint8_t>(store::ReplyKind::error))
                          .u8(static_cast<uint8_t>(ErrorCode::protocol))
                          .bytes(message)
                          .finish());
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
    give_back_if_large(c.in);
  }
  if (!c.dead) update_interest(c, id);
}

void TcpStoreServer::Impl::deliver(std::vector<StoreState::Reply>& replies) {
  for (auto& r : replies) {
    Connection* c = find(r.conn);
    if (c == nullptr) continue;
    queue_output(*c, r.conn, r.frame);
    resume(*c, r.conn);
  }
}

void TcpStoreServer::Impl::queue_output(Connection& c, uint64_t id, const std::string& frame) {
  c.out.append(frame);
  if (!c.dirty) {
    c.dirty = true;
    dirty.push_back(id);
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
    give_back_if_large(c.out);
    if (c.closing) ::shutdown(c.fd.get(), SHUT_WR);
  }
  if (c.pending_out() < kMaxQueuedOutput) resume(c, id);
  if (!c.dead) update_interest(c, id);
}

void TcpStoreServer::Impl::update_interest(Connection& c, uint64_t id) {
  bool want_in = c.closing || (c.pending_out() < kMaxQueuedOutput && c.pending_in() < input_limit(c));
  uint32_t events = EPOLLRDHUP | (want_in ? EPOLLIN : 0u) | (c.pending_out() > 0 ? EPOLLOUT : 0u);
  if (events == c.events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) != 0) return mark_dead(c, id);
  c.events = events;
}

void TcpStoreServer::Impl::fail_connection(Connection& c, uint64_t id, const std::string& message,
                                           const std::string& frame) {
  note_bad_client(message);
  queue_output(c, id, frame);
  c.closing = true;
  c.linger_until = Clock::now() + kLinger;
  c.in.clear();
  c.in_off = 0;
  give_back_if_large(c.in);
  state.drop(id);
  lingering.push_back(id);
}

void TcpStoreServer::Impl::mark_dead(Connection& c, uint64_t id) {
  if (c.dead) return;
  c.dead = true;
  state.drop(id);
  epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  // Closed now, not at the end of the loop turn: an evicted stranger's descriptor is what the
  // next accept needs.
  c.fd.reset();
  if (c.pending()) {
    c.handshake.reset();
    --num_pending;
  } else {
    num_clients.fetch_sub(1, std::memory_order_relaxed);
  }
  c.in = std::string();
  c.out = std::string();
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
  for (uint64_t id : dead) conns.erase(id);
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

Result<std::unique_ptr<TcpStoreServer::Impl>> start_impl(const std::string& host, uint16_t port,
                                                         const TcpStoreServerOptions& o) {
  auto impl = std::make_unique<TcpStoreServer::Impl>();
  const Result<Env>& env_result = global_env();
  if (!env_result.is_ok()) return env_result.status();
  const Env& env = env_result.value();
  if (o.secret && !o.secret->empty()) {
    ASSIGN_OR_RETURN(impl->fixed.secret, auth::JobSecret::from_text(*o.secret, "the store's secret"));
  } else if (!o.secret) {
    const Result<auth::JobSecret>& secret = auth::process_secret();
    if (!secret.is_ok()) return secret.status();
    impl->fixed.secret = secret.value();
  }
  impl->fixed.job_id = o.job_id ? *o.job_id : env.job_id;
  if (impl->fixed.job_id.size() > store::kMaxJobIdBytes) {
    return invalid_argument("the store's job id has " + std::to_string(impl->fixed.job_id.size()) + " bytes; at most " +
                            std::to_string(store::kMaxJobIdBytes) + " are allowed");
  }
  impl->fixed.max_frame_bytes = std::min<size_t>(o.max_frame_bytes ? o.max_frame_bytes : env.store_max_frame_bytes,
                                           store::kMaxFrameBytes);
  impl->fixed.max_clients = o.max_clients ? o.max_clients : env.store_max_clients;
  impl->fixed.max_pending = o.max_pending ? o.max_pending : env.store_max_pending;
  impl->fixed.handshake_timeout = o.handshake_timeout;
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

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const std::string& host, uint16_t port,
                                                      TcpStoreServerOptions options) {
  auto impl = value_or_raise(start_impl(host, port, options));
  Impl* raw = impl.get();
  raise_open_file_limit_once("store server at " + raw->address);
  if (!raw->fixed.secret.present()) auth::warn_unauthenticated_once("store server at " + raw->address);
  raw->thread = std::thread([raw] { raw->run(); });
  BRAID_LOG(info) << "store server listening on " << raw->address << " (secret: " << raw->fixed.secret.source()
                  << ", job id: " << (raw->fixed.job_id.empty() ? "none" : raw->fixed.job_id) << ")";
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

}  // namespace braid
