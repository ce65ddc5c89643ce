#include "transport/shm/shm_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <optional>
#include <cstring>
#include <sstream>

#include "common/log.h"
#include "common/spin.h"
#include "transport/common/host_identity.h"

namespace braid::transport::shm {

namespace {

constexpr uint64_t kSetupMagic = 0x5055544553485242;  // "BRHSETUP"
constexpr size_t kMaxRingBytes = size_t{1} << 30;

// The first message on a connection's socket after the handshake, with the segment and the
// connector's eventfd; the answer carries the acceptor's eventfd.
struct SetupMessage {
  uint64_t magic = kSetupMagic;
  uint64_t ring_bytes = 0;
};

// A word of this process that a peer reads through process_vm_readv at setup: if it can, it
// may read our send buffers the same way.
const uint64_t& probe_word() {
  static const uint64_t word = [] {
    const auth::Nonce n = auth::fresh_nonce();
    uint64_t w = 0;
    std::memcpy(&w, n.data(), sizeof w);
    return w | 1;
  }();
  return word;
}

void publish_probe(Endpoint& e, bool allow) {
  e.pid = static_cast<uint32_t>(::getpid());
  e.probe_addr = allow ? reinterpret_cast<uint64_t>(&probe_word()) : 0;
  e.probe_value = allow ? probe_word() : 0;
}

// Whether this process can read the peer's memory (ptrace rules: same user and, with Yama's
// ptrace_scope >= 1, a ptracer relation or CAP_SYS_PTRACE); told through the segment.
// Why not goes to self.probe_errno (0 where single copy is off at either end).
void probe_peer(Endpoint& self, const Endpoint& peer, pid_t peer_pid, bool allow) {
  uint32_t result = kCmaNo;
  if (allow && peer.probe_addr != 0) {
    uint64_t got = 0;
    iovec local{&got, sizeof got};
    iovec remote{reinterpret_cast<void*>(peer.probe_addr), sizeof got};
    const ssize_t n = ::process_vm_readv(peer_pid, &local, 1, &remote, 1, 0);
    if (n == static_cast<ssize_t>(sizeof got) && got == peer.probe_value) {
      result = kCmaYes;
    } else {
      self.probe_errno = static_cast<uint32_t>(n < 0 ? errno : EIO);
    }
  }
  self.cma_readable.store(result, std::memory_order_release);
}

Handshake hello_for(const PeerIdentity& who) {
  Handshake h;
  h.comm_id = who.comm_id;
  h.from_rank = who.self_rank;
  h.to_rank = who.peer_rank;
  h.boot_id = local_host_identity().boot_id;
  return h;
}

}  // namespace

Result<std::unique_ptr<Transport>> ShmTransport::create(const TransportOptions& options) {
  UniqueFd efd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (efd.get() < 0) return system_error("eventfd for the shm transport", errno);
  return std::unique_ptr<Transport>(new ShmTransport(options, std::move(efd)));
}

ShmTransport::ShmTransport(const TransportOptions& options, UniqueFd eventfd)
    : env_(options.env),
      secret_(options.secret),
      eventfd_(std::move(eventfd)),
      ring_bytes_(std::clamp(options.env.shm_ring_bytes, kMinRingBytes, kMaxRingBytes) / kRecordAlign * kRecordAlign),
      cma_(options.env.shm_cma        ? CmaPolicy::always
           : options.env.shm_cma_auto ? CmaPolicy::huge_pages
                                      : CmaPolicy::off) {}

ShmTransport::~ShmTransport() {
  // Connections should be gone first (transport.h); any left must not call back into us.
  for (ShmConnection* c : connections_) c->detach();
}

void ShmTransport::forget(ShmConnection* c) {
  connections_.erase(std::remove(connections_.begin(), connections_.end(), c), connections_.end());
}

Capabilities ShmTransport::capabilities() const {
  Capabilities c;
  c.max_in_flight = ShmConnection::kMaxInFlight;
  c.watches_peer_cpu = true;
  c.max_parts_bytes = ShmConnection::kMaxPartsBytes;
  return c;
}

bool ShmTransport::is_host_local(const std::string& address) const { return address.rfind(kAddressPrefix, 0) == 0; }

// ": process_vm_readv: <why>" from the first peer that could not read us, or "".
std::string ShmTransport::refused_reason() const {
  for (const ShmConnection* c : connections_) {
    if (!c->peer_reads_us() && c->peer_probe_errno() != 0) {
      return std::string("; process_vm_readv: ") + std::strerror(c->peer_probe_errno());
    }
  }
  return {};
}

std::string ShmTransport::describe() const {
  std::ostringstream s;
  auto parsed = ShmAddress::parse(address_);
  s << "shm on @" << (parsed.is_ok() ? parsed.value().socket_name : std::string("(not listening)"));
  if (smallest_ring_ > 0) {
    s << ", rings of " << (smallest_ring_ >> 10) << " KiB per direction, large messages ";
    const int n = static_cast<int>(connections_.size());
    const auto cma_peers = std::count_if(connections_.begin(), connections_.end(),
                                         [](const ShmConnection* c) { return c->peer_reads_us(); });
    if (cma_ == CmaPolicy::off) {
      s << "through the pipelined two-copy ring (BRAID_SHM_CMA=1: single copy by cross-memory attach)";
    } else {
      if (cma_ == CmaPolicy::always) {
        s << "single-copy (cross-memory attach)";
      } else {
        s << "through the pipelined two-copy ring, single-copy (cross-memory attach) when larger than the ring and "
             "in huge pages (the 2 MiB ranges under a message moved onto them, MADV_COLLAPSE)"
          << (pages_.available() ? "" : " (never here: this kernel cannot tell huge pages, PAGEMAP_SCAN)");
      }
      if (cma_peers != n) {
        s << "; single copy to " << cma_peers << " of " << n
          << " peers only, through the two-copy ring to the rest (ptrace rules forbid reading their memory: "
             "kernel.yama.ptrace_scope, a seccomp profile, or different users"
          << refused_reason() << ")";
      }
    }
  }
  return s.str();
}

Result<std::string> ShmTransport::listen() {
  if (listen_fd_.get() >= 0) return address_;
  std::string name;
  ASSIGN_OR_RETURN(listen_fd_, listen_abstract(name));
  address_ = ShmAddress{name, local_shm_host()}.to_string();
  BRAID_LOG(info) << "shm listening on " << address_;
  return address_;
}

std::unique_ptr<Connection> ShmTransport::make_connection(ShmConnectionSetup setup) {
  setup.completions = &ready_;
  setup.cma = cma_;
  setup.pages = &pages_;
  setup.collapse = cma_ == CmaPolicy::huge_pages ? &collapse_ : nullptr;
  setup.forget = [this](ShmConnection* c) { forget(c); };
  const size_t ring = static_cast<const SegmentHeader*>(setup.segment.base())->ring_bytes;
  smallest_ring_ = smallest_ring_ == 0 ? ring : std::min(smallest_ring_, ring);
  auto c = std::make_unique<ShmConnection>(std::move(setup));
  connections_.push_back(c.get());
  if (cma_ != CmaPolicy::off && !c->peer_reads_us() && c->peer_probe_errno() != 0 && !said_refused_) {
    said_refused_ = true;
    BRAID_LOG(info) << "shm: rank " << c->peer_rank() << " cannot read this rank's memory (process_vm_readv: "
                    << std::strerror(c->peer_probe_errno())
                    << "; ptrace rules: kernel.yama.ptrace_scope, a container's seccomp profile or different users), "
                       "so large messages to it go through the two-copy ring; said once";
  }
  return c;
}

Result<std::unique_ptr<Connection>> ShmTransport::connect(const std::string& address, const PeerIdentity& who,
                                                          Deadline deadline) {
  const std::string where = "rank " + std::to_string(who.self_rank) + " connecting over shm to rank " +
                            std::to_string(who.peer_rank) + " at " + address + ": ";
  if (who.peer_rank == who.self_rank) return invalid_argument(where + "a rank cannot connect to itself");
  auto parsed = ShmAddress::parse(address);
  if (!parsed.is_ok()) return parsed.status().with_context(where);
  const ShmHost here = local_shm_host();
  if (!(parsed.value().host == here) || here.boot_id.empty()) {
    return invalid_argument(where + "that rank is on another host (its boot id/netns/shm device " +
                            parsed.value().host.to_string() + ", ours " + here.to_string() +
                            "); shm joins ranks of one host only: use BRAID_TRANSPORT=tcp");
  }
  if (!secret_.present()) auth::warn_unauthenticated_once("rank " + std::to_string(who.self_rank));
  auto fd = connect_abstract(parsed.value().socket_name, deadline);
  if (!fd.is_ok()) return fd.status().with_context(where);
  auto answered = connector_handshake(fd.value().get(), hello_for(who), secret_, deadline);
  if (!answered.is_ok()) {
    const Status& st = answered.status();
    std::string hint = st.code() == ErrorCode::unauthenticated ? "; " + auth::secret_hint() : "";
    return Status(st.code(), where + "rank " + std::to_string(who.peer_rank) + " " + st.message() + hint);
  }
  auto pid = peer_pid(fd.value().get());
  if (!pid.is_ok()) return pid.status().with_context(where);

  size_t ring = ring_bytes_;
  auto memfd = create_segment(ring);
  if (!memfd.is_ok()) return memfd.status().with_context(where);
  if (ring < ring_bytes_) {
    BRAID_LOG(warn) << where << "shared memory for rings of " << ring_bytes_ << " bytes could not be reserved; using "
                    << ring << " bytes per direction";
  }
  auto mapped = map_segment(memfd.value().get(), segment_bytes(ring));
  if (!mapped.is_ok()) return mapped.status().with_context(where);
  auto* header = new (mapped.value().base()) SegmentHeader();
  header->ring_bytes = ring;
  auto* ctl = static_cast<unsigned char*>(mapped.value().base()) + kHeaderBytes;
  new (ctl) RingControl();
  new (ctl + kControlBytes) RingControl();
  publish_probe(header->ends[0], cma_ != CmaPolicy::off);

  SetupMessage m;
  m.ring_bytes = ring;
  Status st = send_with_fds(fd.value().get(), &m, sizeof m, {memfd.value().get(), eventfd_.get()}, deadline);
  if (!st.is_ok()) return st.with_context(where);
  SetupMessage reply;
  std::vector<UniqueFd> fds;
  st = recv_with_fds(fd.value().get(), &reply, sizeof reply, fds, deadline);
  if (!st.is_ok()) return st.with_context(where);
  if (reply.magic != kSetupMagic || reply.ring_bytes != ring || fds.size() != 1) {
    return protocol_error(where + "its answer to the shared-memory setup is not one (a braid version mismatch?)");
  }
  probe_peer(header->ends[0], header->ends[1], pid.value(), cma_ != CmaPolicy::off);
  // The acceptor waits for this, so both ends know at once which path large sends take.
  st = send_with_fds(fd.value().get(), &m, sizeof m, {}, deadline);
  if (!st.is_ok()) return st.with_context(where);

  ShmConnectionSetup setup;
  setup.segment = std::move(mapped).value();
  setup.socket = std::move(fd).value();
  setup.peer_eventfd = std::move(fds[0]);
  setup.peer_pid = pid.value();
  setup.self_end = 0;
  setup.self_rank = who.self_rank;
  setup.peer_rank = who.peer_rank;
  setup.peer_address = address;
  return make_connection(std::move(setup));
}

Status ShmTransport::finish_accepted(AcceptorHandshake& h, Deadline deadline) {
  const int fd = h.fd();
  ASSIGN_OR_RETURN(pid_t pid, peer_pid(fd));
  SetupMessage m;
  std::vector<UniqueFd> fds;
  RETURN_IF_ERROR(recv_with_fds(fd, &m, sizeof m, fds, deadline));
  if (m.magic != kSetupMagic || fds.size() != 2 || m.ring_bytes < kMinRingBytes || m.ring_bytes > kMaxRingBytes ||
      m.ring_bytes % kRecordAlign != 0) {
    return protocol_error("its shared-memory setup message is not one");
  }
  struct stat st {};
  if (::fstat(fds[0].get(), &st) != 0) return system_error("fstat of the shared segment", errno);
  const size_t bytes = segment_bytes(m.ring_bytes);
  if (static_cast<uint64_t>(st.st_size) < bytes) return protocol_error("the shared segment is smaller than it says");
  ASSIGN_OR_RETURN(Mapping mapped, map_segment(fds[0].get(), bytes));
  auto* header = static_cast<SegmentHeader*>(mapped.base());
  if (header->magic != kSegmentMagic || header->version != kSegmentVersion || header->ring_bytes != m.ring_bytes) {
    return protocol_error("the shared segment's header is not one this build knows");
  }
  publish_probe(header->ends[1], cma_ != CmaPolicy::off);
  probe_peer(header->ends[1], header->ends[0], pid, cma_ != CmaPolicy::off);
  SetupMessage reply;
  reply.ring_bytes = m.ring_bytes;
  RETURN_IF_ERROR(send_with_fds(fd, &reply, sizeof reply, {eventfd_.get()}, deadline));
  SetupMessage probed;  // the connector has probed us: its cma_readable is set
  std::vector<UniqueFd> none;
  RETURN_IF_ERROR(recv_with_fds(fd, &probed, sizeof probed, none, deadline));
  if (probed.magic != kSetupMagic || !none.empty()) return protocol_error("its last setup message is not one");

  ShmConnectionSetup setup;
  setup.segment = std::move(mapped);
  setup.socket = h.take_fd();
  setup.peer_eventfd = std::move(fds[1]);
  setup.peer_pid = pid;
  setup.self_end = 1;
  setup.self_rank = h.hello().to_rank;
  setup.peer_rank = h.hello().from_rank;
  setup.peer_address = "accepted on " + address_;  // the connector's own address is not sent
  pending_[setup.peer_rank] = std::move(setup);
  pending_comm_[h.hello().from_rank] = h.hello().comm_id;
  return Status::ok();
}

Result<std::unique_ptr<Connection>> ShmTransport::accept(const PeerIdentity& who, Deadline deadline) {
  if (listen_fd_.get() < 0) return invalid_argument("accept() before listen()");
  const std::string self = "rank " + std::to_string(who.self_rank);
  if (who.peer_rank == who.self_rank) return invalid_argument(self + " cannot accept a connection from itself");
  if (!secret_.present()) auth::warn_unauthenticated_once(self);
  const AcceptorExpect expect{who.comm_id, who.self_rank, local_host_identity()};
  for (;;) {
    auto it = pending_.find(who.peer_rank);
    if (it != pending_.end() && pending_comm_[who.peer_rank] == who.comm_id) {
      ShmConnectionSetup setup = std::move(it->second);
      pending_.erase(it);
      return make_connection(std::move(setup));
    }
    if (deadline.expired()) {
      return timeout_error(self + " waited in accept() on " + address_ + " but rank " + std::to_string(who.peer_rank) +
                           " never connected over shm (did it start? is it on this host and in this network "
                           "namespace? does it have the same BRAID_SECRET?)");
    }
    RETURN_IF_ERROR(serve_handshakes(expect, deadline));
  }
}

Status ShmTransport::serve_handshakes(const AcceptorExpect& expect, Deadline deadline) {
  auto name_peer = [](int fd) {
    auto pid = peer_pid(fd);
    return "pid " + (pid.is_ok() ? std::to_string(pid.value()) : std::string("unknown"));
  };
  return handshakes_.serve(listen_fd_.get(), address_, expect, secret_, deadline, name_peer,
                           [&](AcceptorHandshake& h) {
                             // The connector sends the segment right after its proof: waiting for it is brief.
                             Status why = h.accepted() ? finish_accepted(h, Deadline::after(kHandshakeTimeout))
                                                       : h.why();
                             if (why.is_ok()) return;
                             BRAID_LOG(warn) << "rank " << expect.self_rank << " on " << address_
                                             << " refused a shm connection from " << h.from()
                                             << (h.hello_checked() ? " that claimed to be rank " +
                                                                         std::to_string(h.hello().from_rank)
                                                                   : "")
                                             << ": " << why.message();
                           });
}

bool ShmTransport::peer_on_this_cpu() {
  const int cpu = sched_getcpu();
  if (cpu < 0) return false;
  bool stacked = false;
  for (ShmConnection* c : connections_) stacked = c->peer_on_cpu(static_cast<uint32_t>(cpu) + 1) || stacked;
  return stacked;
}

// Always inline: poll() then runs each connection's usual receive (ShmConnection::progress, with
// take_whole_records) in its own frame, without a call.
[[gnu::always_inline]] inline bool ShmTransport::progress_all() {
  bool changed = false;
  for (ShmConnection* c : connections_) changed = c->progress() || changed;
  return changed;
}

bool ShmTransport::mid_message() const {
  return std::any_of(connections_.begin(), connections_.end(), [](const ShmConnection* c) { return c->mid_message(); });
}

void ShmTransport::wake() {
  const uint64_t one = 1;
  ssize_t n = ::write(eventfd_.get(), &one, sizeof one);
  (void)n;
}

// Marks every connection asleep, looks once more, and sleeps on the eventfd and the pidfds.
Status ShmTransport::sleep(std::chrono::microseconds timeout) {
  for (ShmConnection* c : connections_) c->set_sleeping(true);
  progress_all();
  std::vector<pollfd> fds;
  if (ready_.empty() && !mid_message()) {
    fds.push_back(pollfd{eventfd_.get(), POLLIN, 0});
    for (ShmConnection* c : connections_) fds.push_back(pollfd{c->liveness_fd(), POLLIN, 0});
    timespec ts{static_cast<time_t>(timeout.count() / 1000000), static_cast<long>(timeout.count() % 1000000) * 1000};
    int n = ::ppoll(fds.data(), fds.size(), &ts, nullptr);
    if (n < 0 && errno != EINTR) return system_error("ppoll in the shm transport", errno);
  }
  for (ShmConnection* c : connections_) c->set_sleeping(false);
  uint64_t drained = 0;
  ssize_t r = ::read(eventfd_.get(), &drained, sizeof drained);
  (void)r;
  for (size_t i = 1; i < fds.size(); ++i) {
    if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) connections_[i - 1]->peer_exited();
  }
  progress_all();
  return Status::ok();
}

bool ShmTransport::arm_wait() {
  for (ShmConnection* c : connections_) c->set_sleeping(true);
  armed_ = true;
  progress_all();  // what peers wrote before they could see the marks
  return ready_.empty() && !mid_message();
}

Status ShmTransport::poll(std::vector<Completion>& out, std::chrono::microseconds timeout) {
  if (armed_) {  // the owner's sleep on wait_fd() is over: peers stop signalling, the count goes
    armed_ = false;
    for (ShmConnection* c : connections_) c->set_sleeping(false);
    uint64_t drained = 0;
    ssize_t r = ::read(eventfd_.get(), &drained, sizeof drained);
    (void)r;
  }
  // Also when completions are waiting (a send that finished as it was posted): a message that
  // arrived meanwhile is then taken in this same pass, not one pass later.
  progress_all();
  if (ready_.empty()) {
    const auto start = Clock::now();
    const auto spin = std::chrono::microseconds(spin_allowed() ? env_.spin_us : 0);
    const auto spin_end = start + std::min(timeout, spin);
    if (start < spin_end) {
      // Ranks free to run on the same CPUs get stacked on one now and then (a woken thread is
      // often placed where its waker runs), and stay so: each wakes the other onto its own
      // CPU. A peer queued behind this spinner cannot answer until it gives the CPU away. So
      // the spinner steps off to another CPU it may use (once per wait), and where it may use
      // this one only, it sleeps at once. Where spinners yield anyway (more ranks than CPUs)
      // the yield hands the CPU over.
      SpinScope spinning;
      bool stepped = false;
      while (ready_.empty() && Clock::now() < spin_end) {
        if (!spinning.yields() && peer_on_this_cpu()) {
          ++stacked_stops_;
          if (!stepped && step_off_cpu(sched_getcpu())) {
            stepped = true;
            ++stacked_moves_;
            continue;
          }
          break;
        }
        spinning.pause();
        progress_all();
      }
    }
    if (ready_.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(start + timeout - Clock::now());
      RETURN_IF_ERROR(sleep(std::max(left, std::chrono::microseconds(0))));
    }
  }
  if (out.empty()) {
    out.swap(ready_);
  } else {
    out.insert(out.end(), std::make_move_iterator(ready_.begin()), std::make_move_iterator(ready_.end()));
  }
  ready_.clear();
  return Status::ok();
}

}  // namespace braid::transport::shm
