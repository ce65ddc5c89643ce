#include "transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <thread>

#include "braid_config.h"
#include "common/log.h"
#include "transport/common/interface_select.h"
#include "transport/tcp/epoll_engine.h"
#include "transport/tcp/tcp_connection.h"
#if BRAID_HAVE_LIBURING
#include "transport/tcp/uring_engine.h"
#endif

namespace braid::transport::tcp {

Result<std::unique_ptr<Engine>> make_engine(EngineKind kind, const Env& env) {
  if (kind == EngineKind::epoll) return EpollEngine::create(env);
#if BRAID_HAVE_LIBURING
  return UringEngine::create(env);
#else
  return Status(ErrorCode::system, "braid was built without liburing");
#endif
}

Result<std::unique_ptr<Transport>> TcpTransport::create(const TransportOptions& options, EngineKind kind) {
  ASSIGN_OR_RETURN(auto engine, make_engine(kind, options.env));
  return std::unique_ptr<Transport>(new TcpTransport(options, std::move(engine)));
}

TcpTransport::TcpTransport(const TransportOptions& options, std::unique_ptr<Engine> engine)
    : env_(options.env),
      master_addr_(options.master_addr),
      listen_host_(options.listen_host),
      engine_(std::move(engine)),
      secret_(options.secret) {}

Capabilities TcpTransport::capabilities() const {
  Capabilities c;  // what each connection says too (TcpConnection::capabilities)
  c.zero_copy_send = engine_->zero_copy();
  c.max_in_flight = TcpConnection::kMaxInFlight;
  return c;
}

bool TcpTransport::is_host_local(const std::string& address) const {
  auto parsed = SocketAddress::parse(address);
  return parsed.is_ok() && parsed.value().is_loopback();
}

Result<std::string> TcpTransport::listen() {
  if (listen_fd_.get() >= 0) return address_;
  SocketAddress bind_to;
  if (!listen_host_.empty()) {
    ASSIGN_OR_RETURN(bind_to, SocketAddress::from_host(listen_host_, 0));
  } else {
    ASSIGN_OR_RETURN(LocalInterface iface, choose_interface(env_.socket_ifname, master_addr_, list_interfaces()));
    bind_to = iface.address;
    interface_name_ = iface.name;
  }
  ASSIGN_OR_RETURN(listen_fd_, listen_on(bind_to, env_.port_lo, env_.port_hi));
  SocketAddress bound;
  bound.length = sizeof bound.storage;
  if (getsockname(listen_fd_.get(), bound.get(), &bound.length) != 0) return system_error("getsockname", errno);
  address_ = bound.to_string();
  BRAID_LOG(info) << name() << " listening on " << address_
                  << (interface_name_.empty() ? "" : " (interface " + interface_name_ + ")");
  return address_;
}

std::string TcpTransport::describe() const {
  std::ostringstream s;
  s << name() << " on " << (interface_name_.empty() ? "" : interface_name_ + " ") << address_;
  if (most_sockets_ > 0) {
    s << ", " << fewest_sockets_;
    if (most_sockets_ != fewest_sockets_) s << "-" << most_sockets_;
    s << (most_sockets_ > 1 ? " sockets" : " socket") << " per peer" << (env_.nsocks > 0 ? " (BRAID_NSOCKS)" : "");
  }
  return s.str();
}

// BRAID_NSOCKS, or a cost model: one TCP flow keeps up with about 10 Gb/s on one core, so a
// faster link gets a socket per 10 Gb/s (at most 8); loopback and unknown links get one.
int TcpTransport::sockets_towards(const SocketAddress& to) const {
  if (env_.nsocks > 0) return env_.nsocks;
  for (const auto& i : list_interfaces()) {
    if (i.address.host() == to.host()) return 1;  // same host
  }
  std::string iface = interface_name_;
  if (iface.empty()) return 1;
  std::ifstream f("/sys/class/net/" + iface + "/speed");
  long mbps = 0;
  if (!(f >> mbps) || mbps <= 0) return 1;
  return static_cast<int>(std::clamp<long>((mbps + 9999) / 10000, 1, 8));
}

Result<std::unique_ptr<Connection>> TcpTransport::connect(const std::string& address, const PeerIdentity& who,
                                                          Deadline deadline) {
  const std::string where = "rank " + std::to_string(who.self_rank) + " connecting to rank " +
                            std::to_string(who.peer_rank) + " at " + address + ": ";
  if (who.peer_rank == who.self_rank) {
    return invalid_argument(where + "a rank cannot connect to itself (the runtime asked for a connection from rank " +
                            std::to_string(who.self_rank) + " to itself: two ranks with the same RANK?)");
  }
  auto to = SocketAddress::parse(address);
  if (!to.is_ok()) return to.status().with_context(where);
  if (listen_fd_.get() >= 0 && to.value().to_string() == address_) {
    return invalid_argument(where + "that is this rank's own listening address, so the connection would lead back "
                            "to itself (did two ranks publish the same address? a store left from another job?)");
  }
  if (!secret_.present()) auth::warn_unauthenticated_once("rank " + std::to_string(who.self_rank));
  int n = sockets_towards(to.value());
  const HostIdentity self_host = local_host_identity();
  HostIdentity peer_host;
  std::vector<UniqueFd> sockets;
  for (int i = 0; i < n; ++i) {
    auto fd = connect_with_retry(to.value(), deadline);
    if (!fd.is_ok()) return fd.status().with_context(where);
    Handshake h;
    h.nsocks = static_cast<uint16_t>(n);
    h.comm_id = who.comm_id;
    h.from_rank = who.self_rank;
    h.to_rank = who.peer_rank;
    h.socket_index = static_cast<uint16_t>(i);
    h.boot_id = self_host.boot_id;
    h.cpu_mask = self_host.cpus;
    auto answered = connector_handshake(fd.value().get(), h, secret_, deadline);
    if (!answered.is_ok()) {
      const Status& st = answered.status();
      if (st.code() == ErrorCode::unauthenticated) {
        return Status(st.code(), where + "rank " + std::to_string(who.peer_rank) + " " + st.message() + "; " +
                                     auth::secret_hint());
      }
      return Status(st.code(), where + "rank " + std::to_string(who.peer_rank) + ": " + st.message());
    }
    if (i == 0) peer_host = answered.value();
    Status st = tune_data_socket(fd.value().get(), env_);
    if (!st.is_ok()) return st.with_context(where);
    sockets.push_back(std::move(fd).value());
  }
  return make_connection(who, address, std::move(sockets), self_host, peer_host);
}

Result<std::unique_ptr<Connection>> TcpTransport::accept(const PeerIdentity& who, Deadline deadline) {
  if (listen_fd_.get() < 0) return invalid_argument("accept() before listen()");
  const std::string self = "rank " + std::to_string(who.self_rank);
  if (who.peer_rank == who.self_rank) {
    return invalid_argument(self + " cannot accept a connection from itself (the runtime asked for one: two ranks "
                                   "with the same RANK?)");
  }
  if (!secret_.present()) auth::warn_unauthenticated_once(self);
  const AcceptorExpect expect{who.comm_id, who.self_rank, local_host_identity()};
  for (;;) {
    auto it = pending_.find(who.peer_rank);
    if (it != pending_.end() && it->second.comm_id == who.comm_id) {
      bool complete = true;
      for (const auto& s : it->second.sockets) complete = complete && s.get() >= 0;
      if (complete) {
        Pending p = std::move(it->second);
        pending_.erase(it);
        for (auto& s : p.sockets) {
          Status st = tune_data_socket(s.get(), env_);
          if (!st.is_ok()) {
            return st.with_context(self + " accepting rank " + std::to_string(who.peer_rank) + " from " + p.address +
                                   ": ");
          }
        }
        return make_connection(who, p.address, std::move(p.sockets), p.self_host, p.peer_host);
      }
    }
    if (deadline.expired()) {
      auto claim = refused_claims_.find(who.peer_rank);
      if (claim != refused_claims_.end()) {
        const RefusedClaim& c = claim->second;
        return timeout_error(self + " waited in accept() on " + address_ + " for rank " +
                             std::to_string(who.peer_rank) + ", but refused the " + std::to_string(c.count) +
                             " connection(s) that claimed to be it (the last from " + c.from + ": " + c.why +
                             "); " + auth::secret_hint());
      }
      return timeout_error(self + " waited in accept() on " + address_ + " but rank " + std::to_string(who.peer_rank) +
                           " never connected (did it start? can it reach this address? BRAID_SOCKET_IFNAME)");
    }
    RETURN_IF_ERROR(serve_handshakes(expect, deadline));
  }
}

Status TcpTransport::serve_handshakes(const AcceptorExpect& expect, Deadline deadline) {
  return handshakes_.serve(
      listen_fd_.get(), address_, expect, secret_, deadline, [](int fd) { return peer_name(fd); },
      [&](AcceptorHandshake& h) {
        if (!h.accepted()) {
          refused(h, expect.self_rank);
          return;
        }
        const Handshake& hs = h.hello();
        Pending& p = pending_[hs.from_rank];
        if (p.comm_id != hs.comm_id || p.sockets.size() != hs.nsocks) {
          p = Pending{hs.comm_id, std::vector<UniqueFd>(hs.nsocks), h.from(), {}, {}};
        }
        if (hs.socket_index == 0) {
          p.address = h.from();
          p.self_host = expect.self_host;
          p.peer_host = HostIdentity{hs.boot_id, hs.cpu_mask};
        }
        p.sockets[hs.socket_index] = h.take_fd();
      });
}

// Each refused socket is closed (by its owner going away) and counted; the log says what was
// wrong at most once per interval, so a flood of strangers cannot flood the log.
void TcpTransport::refused(const AcceptorHandshake& h, int self_rank) {
  constexpr auto kRefusalLogInterval = std::chrono::seconds(10);
  // Strangers may claim any number of ranks: only so many are remembered.
  constexpr size_t kMaxClaims = 1024;
  const int claimed = h.hello().from_rank;
  if (h.hello_checked() && (refused_claims_.size() < kMaxClaims || refused_claims_.count(claimed) > 0)) {
    RefusedClaim& c = refused_claims_[claimed];
    ++c.count;
    c.from = h.from();
    c.why = h.why().message();
  }
  const auto now = Clock::now();
  if (refusal_logged_at_ != Clock::time_point{} && now - refusal_logged_at_ < kRefusalLogInterval) {
    ++refusals_unlogged_;
    return;
  }
  std::ostringstream m;
  m << "rank " << self_rank << " on " << address_ << " refused a connection from " << h.from();
  if (h.hello_checked()) m << " that claimed to be rank " << h.hello().from_rank;
  m << ": " << h.why().message();
  if (refusals_unlogged_ > 0) {
    m << " (and " << refusals_unlogged_ << " more since the last such line, not logged)";
  }
  BRAID_LOG(warn) << m.str();
  refusal_logged_at_ = now;
  refusals_unlogged_ = 0;
}

Result<std::unique_ptr<Connection>> TcpTransport::make_connection(const PeerIdentity& who, std::string address,
                                                                  std::vector<UniqueFd> sockets,
                                                                  const HostIdentity& self_host,
                                                                  const HostIdentity& peer_host) {
  ConnectionSetup setup;
  setup.engine = engine_.get();
  setup.completions = &ready_;
  setup.comm_id = who.comm_id;
  setup.self_host = self_host;
  setup.peer_host = peer_host;
  setup.self_rank = who.self_rank;
  setup.peer_rank = who.peer_rank;
  setup.peer_address = std::move(address);
  setup.peer_timeout_s = env_.peer_timeout_s;
  const int n = static_cast<int>(sockets.size());
  fewest_sockets_ = fewest_sockets_ == 0 ? n : std::min(fewest_sockets_, n);
  most_sockets_ = std::max(most_sockets_, n);
  setup.sockets = std::move(sockets);
  auto conn = std::make_unique<TcpConnection>(std::move(setup));
  RETURN_IF_ERROR(conn->start());
  return std::unique_ptr<Connection>(std::move(conn));
}

Status TcpTransport::poll(std::vector<Completion>& out, std::chrono::microseconds timeout) {
  // Completions come from the engine's passes, except a send a connection finished in post_send
  // (a small message on the shared-CPU path) and failures of operations posted after one: those
  // are returned without a pass, which on one CPU would cost the ping-pong its time.
  Status st;
  if (ready_.empty()) st = engine_->run(timeout, ready_);
  if (out.empty()) {
    out.swap(ready_);  // the two lists trade their storage: no element is moved
  } else {
    out.insert(out.end(), std::make_move_iterator(ready_.begin()), std::make_move_iterator(ready_.end()));
  }
  ready_.clear();
  return st;
}

}  // namespace braid::transport::tcp
