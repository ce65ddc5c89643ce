#include "transport/ib/ib_transport.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sstream>

#include "common/log.h"
#include "common/spin.h"
#include "transport/common/interface_select.h"
#include "transport/ib/hca_spec.h"
#include "transport/ib/ib_devices.h"

namespace braid::transport::ib {

namespace {

// epoll tags: the completion channel, the eventfd; anything else is an IbConnection*.
constexpr uint64_t kTagChannel = 1;
constexpr uint64_t kTagWake = 2;

// How often a busy poll() looks at the liveness sockets (an idle one sleeps on them).
constexpr auto kSocketCheckInterval = std::chrono::milliseconds(10);

std::string tcp_part(const std::string& address) { return address.substr(0, address.find('/')); }

}  // namespace

IbTransport::IbTransport(const TransportOptions& options)
    : env_(options.env),
      master_addr_(options.master_addr),
      listen_host_(options.listen_host),
      bootstrap_(options.secret),
      spin_(options.env.spin_us) {}

IbTransport::~IbTransport() = default;

Result<std::unique_ptr<Transport>> IbTransport::create(const TransportOptions& options) {
  std::unique_ptr<IbTransport> t(new IbTransport(options));
  Status st = t->open(options);
  if (!st.is_ok()) return st.with_context("BRAID_TRANSPORT=ib: ");
  return std::unique_ptr<Transport>(std::move(t));
}

Status IbTransport::open(const TransportOptions& options) {
  (void)options;
  qp_settings_ = QpSettings{env_.ib_timeout, env_.ib_retry_cnt, env_.ib_sl, env_.ib_tc};
  if (env_.ib_qps_per_connection < 1 || static_cast<size_t>(env_.ib_qps_per_connection) > kMaxQps) {
    return invalid_argument("BRAID_IB_QPS_PER_CONNECTION=" + std::to_string(env_.ib_qps_per_connection) +
                            " is outside 1.." + std::to_string(kMaxQps));
  }
  ASSIGN_OR_RETURN(HcaSpec spec, parse_hca_spec(env_.ib_hca));
  // The bootstrap listens where tcp would, and its address picks the GID (port_choice.h).
  if (!listen_host_.empty()) {
    bootstrap_ip_ = listen_host_;
  } else {
    ASSIGN_OR_RETURN(LocalInterface iface,
                     choose_interface(env_.socket_ifname, master_addr_, list_interfaces()));
    bootstrap_ip_ = iface.address.host();
    interface_name_ = iface.name;
  }
  ASSIGN_OR_RETURN(std::vector<PortInfo> ports, enumerate_ports());
  std::optional<int> forced_gid;
  if (env_.ib_gid_index >= 0) forced_gid = env_.ib_gid_index;
  ASSIGN_OR_RETURN(port_, choose_port(ports, spec, forced_gid, bootstrap_ip_));
  ASSIGN_OR_RETURN(device_, Device::open(port_));
  ASSIGN_OR_RETURN(GdrSetting gdr_setting, parse_gdr_setting(env_.gdr));
  gdr_ = decide_gdr(gdr_setting, probe_gdr(device_->pd()));
  if (gdr_.error) return invalid_argument(gdr_.line);
  memory_ = std::make_unique<MemoryRegistry>(device_->pd(), device_->where(), gdr_.use_dmabuf);
  if (wants_flusher(gdr_.use_dmabuf, flush_test_mode())) {
    ASSIGN_OR_RETURN(flush_, GdrFlusher::create(*device_, qp_settings_, gdr_.use_dmabuf, flush_test_mode(),
                                                std::chrono::milliseconds(static_cast<int64_t>(env_.timeout_s * 1000))));
  }
  epoll_fd_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  wake_fd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (epoll_fd_.get() < 0 || wake_fd_.get() < 0) return system_error("ib: epoll/eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTagChannel;
  if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, device_->channel()->fd, &ev) != 0) {
    return system_error("ib: epoll_ctl (completion channel)", errno);
  }
  ev.data.u64 = kTagWake;
  if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev) != 0) return system_error("ib: epoll_ctl", errno);
  BRAID_LOG(info) << "ib: " << port_.why << "; GPUDirect: " << gdr_.line;
  return Status::ok();
}

Capabilities IbTransport::capabilities() const {
  Capabilities c;
  c.cuda_memory = gdr_.use_dmabuf;
  c.dmabuf = gdr_.use_dmabuf;
  c.zero_copy_send = true;
  c.needs_registration = false;  // the registration cache does it
  c.max_in_flight = kCtsEntries;
  return c;
}

std::string IbTransport::describe() const {
  std::ostringstream s;
  s << "ib on " << device_->where() << " (" << (port_.ethernet ? "RoCE" : "InfiniBand") << ", GID index "
    << port_.gid_index << " " << format_gid(port_.gid) << ", MTU " << port_.mtu_bytes << "), "
    << env_.ib_qps_per_connection << (env_.ib_qps_per_connection == 1 ? " QP" : " QPs") << " per connection"
    << ", bootstrap " << bootstrap_.address() << (interface_name_.empty() ? "" : " (" + interface_name_ + ")")
    << ", GPUDirect: " << gdr_.line;
  return s.str();
}

Result<std::string> IbTransport::listen() {
  if (!address_.empty()) return address_;
  ASSIGN_OR_RETURN(SocketAddress bind_to, SocketAddress::from_host(bootstrap_ip_, 0));
  ASSIGN_OR_RETURN(std::string at, bootstrap_.listen(bind_to, env_.port_lo, env_.port_hi));
  address_ = at + "/" + port_.device + ":" + std::to_string(port_.port);
  BRAID_LOG(info) << "ib listening on " << address_;
  return address_;
}

Result<std::unique_ptr<Connection>> IbTransport::connect(const std::string& address, const PeerIdentity& who,
                                                         Deadline deadline) {
  const std::string where = "rank " + std::to_string(who.self_rank) + " connecting to rank " +
                            std::to_string(who.peer_rank) + " at " + address + " over ib: ";
  if (who.peer_rank == who.self_rank) return invalid_argument(where + "a rank cannot connect to itself");
  auto to = SocketAddress::parse(tcp_part(address));
  if (!to.is_ok()) return to.status().with_context(where);
  auto fd = bootstrap_.connect(to.value(), who, deadline);
  if (!fd.is_ok()) return fd.status().with_context(where + "rank " + std::to_string(who.peer_rank) + ": ");
  auto conn = establish(who, std::move(fd).value(), address, deadline);
  if (!conn.is_ok()) return conn.status().with_context(where);
  return conn;
}

Result<std::unique_ptr<Connection>> IbTransport::accept(const PeerIdentity& who, Deadline deadline) {
  ASSIGN_OR_RETURN(BootstrapSocket s, bootstrap_.accept(who, deadline));
  auto conn = establish(who, std::move(s.fd), s.from, deadline);
  if (!conn.is_ok()) {
    return conn.status().with_context("rank " + std::to_string(who.self_rank) + " accepting rank " +
                                      std::to_string(who.peer_rank) + " from " + s.from + " over ib: ");
  }
  return conn;
}

Result<std::unique_ptr<Connection>> IbTransport::establish(const PeerIdentity& who, UniqueFd socket,
                                                           const std::string& peer_address, Deadline deadline) {
  IbShared shared;
  shared.device = device_.get();
  shared.memory = memory_.get();
  shared.ready = &ready_;
  shared.flush = flush_.get();
  shared.stats = &posts_;
  shared.qp = qp_settings_;
  shared.nqps = static_cast<uint32_t>(env_.ib_qps_per_connection);
  shared.forget = [this](IbConnection* c) { forget(c); };
  shared.unwatch = [this](int fd) { (void)epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr); };
  ASSIGN_OR_RETURN(std::unique_ptr<IbConnection> conn, IbConnection::create(shared, who.self_rank, who.peer_rank));
  unsigned char mine[kCardBytes], theirs[kCardBytes];
  encode(conn->card(), mine);
  RETURN_IF_ERROR(write_exact(socket.get(), mine, sizeof mine, deadline));
  Status st = read_exact(socket.get(), theirs, sizeof theirs, deadline);
  if (!st.is_ok()) return st.with_context("reading its ib connection card: ");
  ASSIGN_OR_RETURN(ConnectionCard card, decode_card(theirs));
  if (card.nqps != env_.ib_qps_per_connection) {
    return invalid_argument("BRAID_IB_QPS_PER_CONNECTION differs: " + std::to_string(env_.ib_qps_per_connection) +
                            " on rank " + std::to_string(who.self_rank) + ", " + std::to_string(card.nqps) +
                            " on rank " + std::to_string(who.peer_rank) + " (set the same on every rank)");
  }
  // The peer's QPs must be ready to receive before anyone writes: each end says so once its QPs
  // are at RTS (and its receives posted), and waits to hear it.
  std::string peer_name = peer_address;
  RETURN_IF_ERROR(conn->start(card, std::move(socket), peer_name));
  const unsigned char ready = kReadyByte;
  unsigned char got = 0;
  RETURN_IF_ERROR(write_exact(conn->socket_fd(), &ready, 1, deadline));
  st = read_exact(conn->socket_fd(), &got, 1, deadline);
  if (!st.is_ok()) return st.with_context("waiting for its QPs to be ready: ");
  if (got != kReadyByte) return protocol_error("a wrong ready byte after the connection cards");
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = reinterpret_cast<uint64_t>(conn.get());
  if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, conn->socket_fd(), &ev) != 0) {
    return system_error("ib: epoll_ctl (bootstrap socket)", errno);
  }
  connections_.push_back(conn.get());
  return std::unique_ptr<Connection>(std::move(conn));
}

void IbTransport::forget(IbConnection* c) {
  if (c->socket_fd() >= 0) (void)epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, c->socket_fd(), nullptr);
  connections_.erase(std::remove(connections_.begin(), connections_.end(), c), connections_.end());
}

Result<MemoryRegion> IbTransport::register_memory(void* base, size_t bytes, MemoryKind kind) {
  auto mr = memory_->pin(base, bytes, kind);
  if (!mr.is_ok() && kind == MemoryKind::cuda && !gdr_.use_dmabuf) {
    return Status(mr.status().code(), mr.status().message() + " (" + gdr_.line + ")");
  }
  if (!mr.is_ok()) return mr.status();
  return MemoryRegion{base, bytes, kind, mr.value().rkey};
}

void IbTransport::deregister_memory(const MemoryRegion& region) { memory_->unpin(region.base, region.bytes); }

int IbTransport::pass(Clock::time_point now) {
  int n = 0;
  for (size_t i = 0; i < connections_.size(); ++i) n += connections_[i]->poll_cq();
  for (size_t i = 0; i < connections_.size(); ++i) connections_[i]->progress(now);
  return n;
}

void IbTransport::check_sockets(Clock::time_point now) {
  sockets_checked_ = now;
  epoll_event evs[16];
  const int n = epoll_wait(epoll_fd_.get(), evs, 16, 0);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.u64 > kTagWake) reinterpret_cast<IbConnection*>(evs[i].data.u64)->check_socket();
  }
}

Status IbTransport::sleep(std::chrono::microseconds timeout) {
  for (IbConnection* c : connections_) c->ask_before_sleep();
  for (IbConnection* c : connections_) {
    RETURN_IF_ERROR(c->arm());
    ++waits_.arms;
  }
  // A completion that came between the last pass and arming raised no event: look once more.
  pass();
  if (!ready_.empty()) return Status::ok();
  // A clear-to-send a connection holds back must go in time (cts_hold.h).
  for (IbConnection* c : connections_) {
    if (auto due = c->cts_due()) {
      timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::microseconds>(*due - Clock::now()));
    }
  }
  timeout = std::max(timeout, std::chrono::microseconds(0));
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout + std::chrono::microseconds(999));
  epoll_event evs[16];
  ++waits_.sleeps;
  const int n = epoll_wait(epoll_fd_.get(), evs, 16, static_cast<int>(std::min<int64_t>(ms.count(), 1 << 30)));
  if (n < 0 && errno != EINTR) return system_error("ib: epoll_wait", errno);
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = evs[i].data.u64;
    if (tag == kTagChannel) {
      ibv_cq* cq = nullptr;
      void* ctx = nullptr;
      while (ibv_get_cq_event(device_->channel(), &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        ++waits_.channel_events;
      }
    } else if (tag == kTagWake) {
      uint64_t v;
      (void)::read(wake_fd_.get(), &v, sizeof v);
    } else {
      reinterpret_cast<IbConnection*>(tag)->check_socket();
    }
  }
  pass();
  return Status::ok();
}

Status IbTransport::poll(std::vector<Completion>& out, std::chrono::microseconds timeout) {
  ++waits_.polls;
  pass();
  const auto start = Clock::now();  // one clock read for both
  if (start - sockets_checked_ > kSocketCheckInterval) check_sockets(start);
  if (ready_.empty() && timeout.count() > 0) {
    // Spin as long as recent completions took to come (spin_budget.h), when a wait may spin at
    // all (common/spin.h: not on a progress thread while nobody waits for a result).
    const auto spin = spin_allowed() ? std::min(timeout, spin_.budget()) : std::chrono::microseconds(0);
    if (spin.count() > 0) {
      SpinScope spinning;
      while (ready_.empty()) {
        const auto now = Clock::now();
        if (now - start >= spin) break;
        spinning.pause();
        pass(now);  // the connections need not read the clock again
        ++waits_.spin_passes;
      }
    }
    const auto left = timeout - std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    if (ready_.empty() && left.count() > 0) RETURN_IF_ERROR(sleep(left));
    const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    if (!ready_.empty()) {
      spin_.completed_after(waited);
    } else if (waited.count() > SpinBudget::kCapUs) {
      spin_.nothing_within_cap();
    }
  }
  if (out.empty()) {
    out.swap(ready_);  // the caller's vector keeps its capacity for the next poll, in ready_
  } else {
    out.insert(out.end(), std::make_move_iterator(ready_.begin()), std::make_move_iterator(ready_.end()));
    ready_.clear();
  }
  return Status::ok();
}

void IbTransport::wake() {
  const uint64_t one = 1;
  (void)::write(wake_fd_.get(), &one, sizeof one);
}

}  // namespace braid::transport::ib
