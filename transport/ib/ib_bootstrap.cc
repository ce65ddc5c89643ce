#include "transport/ib/ib_bootstrap.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/log.h"
#include "transport/common/host_identity.h"

namespace braid::transport::ib {

Result<std::string> Bootstrap::listen(const SocketAddress& bind_to, uint16_t port_lo, uint16_t port_hi) {
  ASSIGN_OR_RETURN(listen_fd_, listen_on(bind_to, port_lo, port_hi));
  SocketAddress bound;
  bound.length = sizeof bound.storage;
  if (getsockname(listen_fd_.get(), bound.get(), &bound.length) != 0) return system_error("getsockname", errno);
  address_ = bound.to_string();
  return address_;
}

Result<UniqueFd> Bootstrap::connect(const SocketAddress& to, const PeerIdentity& who, Deadline deadline) {
  ASSIGN_OR_RETURN(UniqueFd fd, connect_with_retry(to, deadline));
  const HostIdentity self = local_host_identity();
  Handshake h;
  h.nsocks = 1;
  h.comm_id = who.comm_id;
  h.from_rank = who.self_rank;
  h.to_rank = who.peer_rank;
  h.socket_index = 0;
  h.boot_id = self.boot_id;
  h.cpu_mask = self.cpus;
  auto answered = connector_handshake(fd.get(), h, secret_, deadline);
  if (!answered.is_ok()) {
    const Status& st = answered.status();
    if (st.code() == ErrorCode::unauthenticated) return Status(st.code(), st.message() + "; " + auth::secret_hint());
    return st;
  }
  return fd;
}

Result<BootstrapSocket> Bootstrap::accept(const PeerIdentity& who, Deadline deadline) {
  if (listen_fd_.get() < 0) return invalid_argument("accept() before listen()");
  const AcceptorExpect expect{who.comm_id, who.self_rank, local_host_identity()};
  for (;;) {
    auto it = pending_.find(who.peer_rank);
    if (it != pending_.end() && it->second.comm_id == who.comm_id) {
      BootstrapSocket s = std::move(it->second.socket);
      pending_.erase(it);
      return s;
    }
    if (deadline.expired()) {
      return timeout_error("rank " + std::to_string(who.self_rank) + " waited in accept() on " + address_ +
                           " but rank " + std::to_string(who.peer_rank) + " never connected (did it start? can it " +
                           "reach this address? BRAID_SOCKET_IFNAME)" +
                           (last_refusal_.empty() ? "" : "; the last connection refused: " + last_refusal_));
    }
    RETURN_IF_ERROR(serve(expect, deadline));
  }
}

// One pass of the shared acceptor (tcp/handshake_queue.h): a socket that sends nothing delays no
// one, and refusals are remembered for accept()'s timeout message.
Status Bootstrap::serve(const AcceptorExpect& expect, Deadline deadline) {
  return handshakes_.serve(
      listen_fd_.get(), address_, expect, secret_, deadline, [](int fd) { return peer_name(fd); },
      [&](AcceptorHandshake& h) {
        if (!h.accepted()) {
          last_refusal_ = "from " + h.from() + ": " + h.why().message();
          BRAID_LOG(warn) << "ib: rank " << expect.self_rank << " on " << address_ << " refused a connection "
                          << last_refusal_;
          return;
        }
        pending_[h.hello().from_rank] = Pending{h.hello().comm_id, BootstrapSocket{h.take_fd(), h.from()}};
      });
}

}  // namespace braid::transport::ib
