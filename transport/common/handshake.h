// transport/common/handshake.h - the authenticated connection handshake (handshake_format.h), both ends.
//
// The connector runs its side blocking-with-deadline on its fresh socket, inside connect(). The
// acceptor runs one AcceptorHandshake per accepted socket and advances each whenever its socket
// is ready, never blocking, so that any number of them can be under way at once and a socket
// that sends nothing costs nothing but its file descriptor until its kHandshakeTimeout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/deadline.h"
#include "common/job_secret.h"
#include "common/status.h"
#include "transport/common/handshake_format.h"
#include "transport/common/host_identity.h"
#include "transport/common/socket_setup.h"

namespace braid::transport {

// The connector's side on a connected socket: sends `hello` (its nonce filled in here), reads
// and checks the answer, verifies the acceptor's proof and sends ours. Returns the acceptor's
// host. Fails with ErrorCode::unauthenticated when the acceptor's proof does not verify (its
// secret differs from ours), protocol for an answer that is not the one expected, peer_lost
// when the acceptor closed without answering (it refused our hello), timeout at `deadline`.
// Messages say what happened only; the caller names the ranks and the address.
Result<HostIdentity> connector_handshake(int fd, Handshake hello, const auth::JobSecret& secret, Deadline deadline);

// What an acceptor expects of every hello.
struct AcceptorExpect {
  uint64_t comm_id = 0;
  int self_rank = 0;
  HostIdentity self_host;  // sent in the answer
};

// One accepted socket on its way through the acceptor's side.
class AcceptorHandshake {
 public:
  enum class Step : uint8_t { more, done, refused };

  AcceptorHandshake(UniqueFd fd, std::string from, Deadline deadline);
  AcceptorHandshake(AcceptorHandshake&&) = default;
  AcceptorHandshake& operator=(AcceptorHandshake&&) = default;

  // Reads what the socket has, answers the hello, verifies the proof. Never blocks. After
  // `done` the hello() is authentic and take_fd() gives the socket, positioned at its first
  // frame; after `refused`, why() says what was wrong and the socket should be closed.
  Step advance(const AcceptorExpect& expect, const auth::JobSecret& secret);
  // `refused` once the deadline has passed without the exchange being complete.
  Step expire();
  // Gives up on the socket for `why` (the acceptor needs room): `refused`.
  Step refuse(Status why);

  int fd() const { return fd_.get(); }
  UniqueFd take_fd() { return std::move(fd_); }
  const std::string& from() const { return from_; }
  Deadline deadline() const { return deadline_; }
  const Handshake& hello() const { return hello_; }
  // Whether the hello was read whole and checked: the rank it claims is then hello().from_rank.
  bool hello_checked() const { return hello_checked_; }
  const Status& why() const { return why_; }
  // Finished with the peer authenticated (Step::done): take_fd() holds its socket.
  bool accepted() const { return state_ == State::finished && why_.is_ok(); }

 private:
  enum class State : uint8_t { hello, proof, finished };

  UniqueFd fd_;
  std::string from_;
  Deadline deadline_;
  State state_ = State::hello;
  unsigned char buf_[kHandshakeBytes] = {};
  size_t got_ = 0;
  Handshake hello_;
  Handshake answer_;
  bool hello_checked_ = false;
  Status why_;
};

}  // namespace braid::transport
