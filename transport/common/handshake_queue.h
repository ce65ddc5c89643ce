// transport/common/handshake_queue.h - the acceptor side of handshake v3 for a whole listener.
//
// Every transport that accepts authenticated connections (tcp, and ib's and shm's bootstrap
// sockets) runs the same loop: accept what waits, advance every unfinished handshake without
// blocking, give up on the oldest when too many are in flight or descriptors run out, and hand
// each handshake that ended to its owner. One implementation, so a hardening of one is a
// hardening of all: a socket that sends nothing delays no one, and a flood of strangers costs
// bounded descriptors.
#pragma once

#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/function_ref.h"
#include "common/job_secret.h"
#include "common/status.h"
#include "transport/common/handshake.h"

namespace braid::transport {

class HandshakeQueue {
 public:
  // One pass: waits for the listener or a handshaking socket (at most until `deadline`, the
  // earliest handshake's deadline, or 100 ms), accepts what waits, advances every handshake.
  // `name_peer(fd)` names a new socket for messages; `ended(h)` gets each handshake that
  // finished, done (take_fd() holds the authenticated socket) or refused (why() says why).
  // Errors only for a listener that fails (named with `address`).
  Status serve(int listen_fd, const std::string& address, const AcceptorExpect& expect, const auth::JobSecret& secret,
               Deadline deadline, FunctionRef<std::string(int)> name_peer,
               FunctionRef<void(AcceptorHandshake&)> ended);

 private:
  std::vector<AcceptorHandshake> handshaking_;  // accepted sockets not yet authenticated
};

}  // namespace braid::transport
