// Who gets into a TcpStoreServer, and what strangers may cost it.
//
// A new connection is "pending" until it proves the job's secret (store_protocol.h). While
// pending it is sent the hello and may send one answer of at most kMaxHandshakeBytes; nothing
// else of it is read. Pending connections are kept in accept order, so the two ways a stranger
// is cut off are both cheap: its deadline passes (the oldest deadline is always at the front),
// or max_pending newer ones arrive (the front is dropped for them). So an idle crowd holds at
// most max_pending descriptors, never the job's own, and a rank's connection, which answers
// within a round trip, gets in however many strangers keep connecting.
#include <sys/resource.h>
#include <sys/socket.h>

#include <cerrno>
#include <mutex>

#include "common/log.h"
#include "runtime/store/store_protocol.h"
#include "runtime/store/tcp_store_server_impl.h"

namespace braid {

using namespace store_server;

namespace {

constexpr size_t kMaxWarnedBadClients = 5;
constexpr auto kBadClientLogInterval = std::chrono::seconds(1);
// When accept fails for lack of descriptors and no stranger can be dropped, pause accepting.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
// Connections accepted per loop turn: a flood of new connections must leave the loop time to
// serve the ones already in (the listening socket stays readable, so the rest come next turn).
constexpr int kAcceptsPerTurn = 256;

}  // namespace

void raise_open_file_limit_once(const std::string& who) {
  static std::once_flag once;
  std::call_once(once, [&] {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
    rlim_t before = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    BRAID_LOG(info) << who << ": raised this process's open-file limit from " << before << " to its hard limit "
                    << rl.rlim_max << ", since every rank holds connections to the store";
  });
}

void TcpStoreServer::Impl::note_bad_client(const std::string& message, bool quiet) {
  if (!quiet && ++bad.count <= kMaxWarnedBadClients) {
    BRAID_LOG(warn) << "store server at " << address << ": " << message
                    << (bad.count == kMaxWarnedBadClients
                            ? " (further failed connections are logged at INFO, at most one line a second)"
                            : "");
    return;
  }
  auto now = Clock::now();
  if (now - bad.logged_at < kBadClientLogInterval) {
    ++bad.unlogged;
    return;
  }
  BRAID_LOG(info) << "store server at " << address << ": " << message
                  << (bad.unlogged ? " (and " + std::to_string(bad.unlogged) + " more failed connections since the last such line)"
                                   : "");
  bad.unlogged = 0;
  bad.logged_at = now;
}

void TcpStoreServer::Impl::accept_all() {
  for (int accepted = 0; accepted < kAcceptsPerTurn; ++accepted) {
    int fd = accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        if (evict_oldest_pending("the open-file limit was reached")) continue;
        note_bad_client("cannot accept more clients (errno " + std::to_string(errno) + "; " +
                        std::to_string(conns.size()) + " connected); raise the open-file limit (ulimit -n)");
        epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, listen_fd.get(), nullptr);
        accept_paused = true;
        accept_resume = Clock::now() + kAcceptBackoff;
      }
      return;  // EAGAIN: none left
    }
    UniqueFd owned(fd);
    if (conns.size() - dead.size() >= fixed.max_clients && !evict_oldest_pending("BRAID_STORE_MAX_CLIENTS was reached")) {
      note_bad_client("refused a connection from " + store::peer_name(fd) + ": already serving " +
                      std::to_string(fixed.max_clients) + " clients (BRAID_STORE_MAX_CLIENTS)");
      continue;
    }
    if (num_pending >= fixed.max_pending) {
      evict_oldest_pending(std::to_string(num_pending) + " newer connections had not authenticated either "
                           "(BRAID_STORE_MAX_PENDING)");
    }
    store::set_no_delay(fd);
    uint64_t id = next_id++;
    auto c = std::make_unique<Connection>();
    c->fd = std::move(owned);
    c->peer = store::peer_name(fd);
    c->handshake = std::make_unique<store::ServerHandshake>(fixed.secret, fixed.job_id, port);
    c->events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c->events;
    ev.data.u64 = id;
    if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev) != 0) continue;  // c closes fd
    Connection& ref = *c;
    conns.emplace(id, std::move(c));
    ++num_pending;
    pending.emplace_back(Clock::now() + fixed.handshake_timeout, id);
    // A fresh socket's send buffer is empty: the hello leaves at once.
    queue_output(ref, id, ref.handshake->hello_frame());
    flush(ref, id);
  }
}

bool TcpStoreServer::Impl::admit(Connection& c, uint64_t id) {
  if (c.closing || c.pending_in() < store::kFrameHeaderBytes) return false;
  uint32_t len = store::decode_u32(c.in.data() + c.in_off);
  if (len > store::kMaxHandshakeBytes) {
    // torch's TCPStore client opens with a one-byte query type (small) and a 64-bit key length.
    const bool torch_like = static_cast<uint8_t>(c.in[c.in_off]) < 16;
    std::string message = "client " + c.peer + " sent " + std::to_string(len) +
                          " bytes where a braid store handshake (at most " + std::to_string(store::kMaxHandshakeBytes) +
                          ") was due; closed it" +
                          (torch_like ? ". Its first bytes look like torch.distributed's TCPStore, which speaks "
                                        "another protocol: give torch its own port (under braidrun torch's store is "
                                        "MASTER_PORT; braid's is BRAID_STORE_PORT)"
                                      : "");
    fail_connection(c, id, message,
                    store::FrameWriter()
                        .u8(static_cast<uint8_t>(store::ReplyKind::error))
                        .u8(static_cast<uint8_t>(ErrorCode::protocol))
                        .bytes("expected a braid store handshake; is this client speaking the braid store protocol?")
                        .finish());
    return false;
  }
  if (c.pending_in() < store::kFrameHeaderBytes + len) return false;
  std::string_view body(c.in.data() + c.in_off + store::kFrameHeaderBytes, len);
  store::ServerHandshake::Verdict v = c.handshake->on_answer(body, c.peer);
  c.in_off += store::kFrameHeaderBytes + len;
  if (!v.status.is_ok()) {
    fail_connection(c, id, v.status.message(), v.frame);
    return false;
  }
  queue_output(c, id, v.frame);
  c.handshake.reset();
  --num_pending;
  num_clients.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void TcpStoreServer::Impl::expire_pending(Clock::time_point now) {
  while (!pending.empty()) {
    auto [deadline, id] = pending.front();
    Connection* c = find(id);
    if (c != nullptr && c->pending()) {
      if (deadline > now) return;
      if (!c->closing) {
        note_bad_client("client " + c->peer + " did not complete the handshake within " +
                        std::to_string(fixed.handshake_timeout.count()) + " ms; closed it");
      }
      mark_dead(*c, id);
    }
    pending.pop_front();
  }
}

bool TcpStoreServer::Impl::evict_oldest_pending(const std::string& why) {
  while (!pending.empty()) {
    uint64_t id = pending.front().second;
    pending.pop_front();
    Connection* c = find(id);
    if (c == nullptr || !c->pending()) continue;
    if (!c->closing) {
      note_bad_client("dropped client " + c->peer +
                      ", which had not completed its handshake: " + why);
    }
    mark_dead(*c, id);
    return true;
  }
  return false;
}

std::optional<Clock::time_point> TcpStoreServer::Impl::next_pending_deadline() const {
  if (pending.empty()) return std::nullopt;
  return pending.front().first;
}

}  // namespace braid
