// transport/ib/ib_bootstrap.h - the TCP side of ib connection setup: a listener whose sockets
// are admitted by the authenticated handshake of transport/common/handshake_format.h (one socket per
// peer), then carry the connection cards (ib_wire.h) and stay open as the liveness channel.
//
// The waiting order is tcp's (handshake_format.h "Who waits for whom"): connect() waits for its
// acceptor's answer; accept() answers every socket that reaches the listener meanwhile and keeps
// the ones of other ranks for their own accept call, so the order cannot deadlock.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/job_secret.h"
#include "common/status.h"
#include "transport/common/handshake.h"
#include "transport/common/handshake_queue.h"
#include "transport/common/socket_address.h"
#include "transport/common/socket_setup.h"
#include "transport/transport.h"

namespace braid::transport::ib {

struct BootstrapSocket {
  UniqueFd fd;
  std::string from;  // the peer's address, for messages
};

class Bootstrap {
 public:
  explicit Bootstrap(auth::JobSecret secret) : secret_(std::move(secret)) {}

  // Listens on `bind_to` with a port from [port_lo, port_hi]; returns "host:port".
  Result<std::string> listen(const SocketAddress& bind_to, uint16_t port_lo, uint16_t port_hi);
  // Connects to `to` as who.self_rank and runs the connector's side of the handshake. Messages
  // say what happened only; the caller names the ranks and the address.
  Result<UniqueFd> connect(const SocketAddress& to, const PeerIdentity& who, Deadline deadline);
  // The authenticated socket of who.peer_rank.
  Result<BootstrapSocket> accept(const PeerIdentity& who, Deadline deadline);
  const std::string& address() const { return address_; }

 private:
  Status serve(const AcceptorExpect& expect, Deadline deadline);

  struct Pending {
    uint64_t comm_id = 0;
    BootstrapSocket socket;
  };
  auth::JobSecret secret_;
  UniqueFd listen_fd_;
  std::string address_;
  std::map<int, Pending> pending_;  // by the connecting rank
  HandshakeQueue handshakes_;
  std::string last_refusal_;  // for the message of an accept() that times out
};

}  // namespace braid::transport::ib
