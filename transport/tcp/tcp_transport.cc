#include "transport/tcp/tcp_transport.h"

#include <fstream>
#include <sstream>

#include "braid_config.h"
#include "common/log.h"
#include "transport/tcp/epoll_engine.h"
#include "transport/tcp/interface_select.h"
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
      engine_(std::move(engine)) {}

Capabilities TcpTransport::capabilities() const {
  Capabilities c;
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
  auto to = SocketAddress::parse(address);
  if (!to.is_ok()) return to.status().with_context(where);
  int n = sockets_towards(to.value());
  const HostIdentity self_host = local_host_identity();
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
    unsigned char buf[kHandshakeBytes];
    encode(h, buf);
    Status st = write_exact(fd.value().get(), buf, sizeof buf, deadline);
    if (st.is_ok()) st = tune_data_socket(fd.value().get(), env_);
    if (!st.is_ok()) return st.with_context(where);
    sockets.push_back(std::move(fd).value());
  }
  // The acceptor's host arrives later, in its answer on each socket (wire_format.h).
  return make_connection(who, address, std::move(sockets), self_host, std::nullopt);
}

Result<std::unique_ptr<Connection>> TcpTransport::accept(const PeerIdentity& who, Deadline deadline) {
  if (listen_fd_.get() < 0) return invalid_argument("accept() before listen()");
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
            return st.with_context("rank " + std::to_string(who.self_rank) + " accepting rank " +
                                   std::to_string(who.peer_rank) + " from " + p.address + ": ");
          }
        }
        return make_connection(who, p.address, std::move(p.sockets), p.self_host, p.peer_host);
      }
    }
    if (deadline.expired()) {
      return timeout_error("rank " + std::to_string(who.self_rank) + " waited in accept() on " + address_ +
                           " but rank " + std::to_string(who.peer_rank) +
                           " never connected (did it start? can it reach this address? BRAID_SOCKET_IFNAME)");
    }
    ASSIGN_OR_RETURN(UniqueFd fd, accept_one(listen_fd_.get(), deadline.remaining_ms(100)));
    if (fd.get() < 0) continue;
    std::string from = peer_name(fd.get());
    // Bounded: a port scanner that connects and sends nothing costs kHandshakeTimeout at most.
    const Deadline handshake_deadline = Deadline::after(kHandshakeTimeout);
    auto got = read_handshake(fd.get(), handshake_deadline);
    Status st = got.status();
    Handshake h = got.is_ok() ? got.value() : Handshake{};
    if (st.is_ok()) st = check_handshake(h, who.comm_id, who.self_rank);
    // The answer: our host, so the connector can tell whether we share its CPU. A fresh
    // socket's send buffer is empty, so this never waits.
    const HostIdentity self_host = local_host_identity();
    if (st.is_ok()) {
      Handshake answer = h;
      answer.from_rank = h.to_rank;
      answer.to_rank = h.from_rank;
      answer.boot_id = self_host.boot_id;
      answer.cpu_mask = self_host.cpus;
      unsigned char buf[kHandshakeBytes];
      encode(answer, buf);
      st = write_exact(fd.get(), buf, sizeof buf, handshake_deadline);
    }
    if (!st.is_ok()) {
      BRAID_LOG(warn) << "rank " << who.self_rank << " on " << address_ << " refused a connection from " << from
                      << ": " << st.message();
      continue;
    }
    Pending& p = pending_[h.from_rank];
    if (p.comm_id != h.comm_id || p.sockets.size() != h.nsocks) {
      p = Pending{h.comm_id, std::vector<UniqueFd>(h.nsocks), from, {}, {}};
    }
    if (h.socket_index == 0) {
      p.address = from;
      p.self_host = self_host;
      p.peer_host = HostIdentity{h.boot_id, h.cpu_mask};
    }
    p.sockets[h.socket_index] = std::move(fd);
  }
}

Result<std::unique_ptr<Connection>> TcpTransport::make_connection(const PeerIdentity& who, std::string address,
                                                                  std::vector<UniqueFd> sockets,
                                                                  const HostIdentity& self_host,
                                                                  std::optional<HostIdentity> peer_host) {
  ConnectionSetup setup;
  setup.engine = engine_.get();
  setup.completions = &ready_;
  setup.comm_id = who.comm_id;
  setup.self_host = self_host;
  setup.peer_host = std::move(peer_host);
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
