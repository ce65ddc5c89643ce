// The liveness socket of an ib connection: the goodbye an end sends when it closes normally,
// and what the other end makes of it, of an EOF without one, or of stray bytes (ib_connection.h;
// docs/ib_datapath.md, "Setting up a connection", step 6).
#include "transport/ib/ib_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace braid::transport::ib {

namespace {

// How long a goodbye may wait for the messages its sender posted to land (ib_wire.h).
constexpr auto kGoodbyeDrain = std::chrono::seconds(2);

}  // namespace

void IbConnection::check_socket() {
  if (socket_.get() < 0 || !failure_.is_ok()) return;
  ssize_t n = 0;
  while (bye_got_ < kByeBytes) {
    n = ::recv(socket_.get(), bye_ + bye_got_, kByeBytes - bye_got_, MSG_DONTWAIT);
    if (n <= 0) break;
    bye_got_ += static_cast<size_t>(n);
  }
  const int err = errno;
  if (bye_got_ < kByeBytes && n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)) {
    if (bye_got_ == 0 || bye_[0] == kByeByte) return;  // the rest of a goodbye is on its way
  }
  // What the peer finished before it went may still be on its way into the CQ: take it first.
  // After a goodbye, until every message it posted has arrived for the receives waiting here
  // (bounded: on a loaded or emulated host their completions can trail the EOF by
  // milliseconds); without one, briefly.
  const bool said_bye = bye_got_ == kByeBytes && bye_[0] == kByeByte;
  uint64_t peer_sent = 0;
  if (said_bye) std::memcpy(&peer_sent, bye_ + 9, sizeof peer_sent);
  const auto until = Clock::now() + (said_bye ? kGoodbyeDrain : std::chrono::milliseconds(2));
  do {
    poll_cq();
    progress();
  } while (failure_.is_ok() && Clock::now() < until &&
           (!said_bye || (recv_.outstanding() > 0 && recv_.completed() < peer_sent)));
  if (!failure_.is_ok()) return;
  if (bye_got_ > 0 && bye_[0] != kByeByte) {
    fail(ErrorCode::protocol, "unexpected bytes on its bootstrap connection (not a braid ib peer?)");
  } else if (bye_got_ == kByeBytes) {
    uint64_t received = 0;
    std::memcpy(&received, bye_ + 1, sizeof received);
    peer_closed(received, peer_sent);
  } else if (n == 0 || err == ECONNRESET || err == EPIPE) {
    fail(ErrorCode::peer_lost, "the peer's bootstrap connection ended without a goodbye: rank " +
                                   std::to_string(peer_rank_) + " exited or was killed (its log says why)");
  } else {
    fail(ErrorCode::peer_lost, "its bootstrap connection failed: " + std::string(std::strerror(err)));
  }
}

namespace {

// The peer's end of a TCP socket arrived (FIN or reset), read or not.
bool end_arrived(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return fd >= 0 && ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP)) != 0;
}

}  // namespace

// A goodbye read, a peer_lost failure, or the bootstrap socket's end arrived, whether or not
// check_socket() has read it yet. After close(), the end may be the peer's answer to this end's
// goodbye (transport.h); after a failure of another kind the socket is gone and nothing is said.
bool IbConnection::peer_ended() const {
  if (peer_said_bye_ || failure_.code() == ErrorCode::peer_lost) return true;
  if (closed_socket_.get() >= 0) return end_arrived(closed_socket_.get());
  return failure_.is_ok() && end_arrived(socket_.get());
}

void IbConnection::peer_closed(uint64_t received, uint64_t peer_sent) {
  peer_said_bye_ = true;
  while (!sends_.empty() && sends_.front().started && sends_.front().seq < received) {
    Send& s = sends_.front();
    release(s.mr, s.has_mr);
    report(Completion{this, s.cookie, true, s.bytes, Status::ok()});
    sends_.pop_front();
  }
  // With nothing outstanding this is an ordinary shutdown (the peer's communicator went first):
  // a later operation still fails with this message, but nothing is worth a warning now.
  const bool idle = sends_.empty() && recv_.posted().empty();
  fail(ErrorCode::peer_lost,
       "rank " + std::to_string(peer_rank_) +
           " closed this connection normally (its communicator was destroyed, or it exited) "
           "with this operation outstanding (it had sent " + std::to_string(peer_sent) + " messages here, " +
           std::to_string(recv_.completed()) + " of them received when it closed; it had received " +
           std::to_string(received) + " of the " + std::to_string(sends_started_) + " sent from here)",
       !idle);
}

void IbConnection::close() {
  if (socket_.get() >= 0 && failure_.is_ok() && started_) {
    unsigned char bye[kByeBytes];
    bye[0] = kByeByte;
    const uint64_t received = recv_.completed();
    std::memcpy(bye + 1, &received, sizeof received);
    std::memcpy(bye + 9, &sends_started_, sizeof sends_started_);
    // Nothing else was ever written to this socket after setup: its buffer takes the goodbye at once.
    (void)::send(socket_.get(), bye, sizeof bye, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  // The socket is shut down for writing (the peer reads its end as it would a close) but kept
  // until destruction, so that peer_ended() still answers: shrink() asks which peers' ends
  // arrived after this rank closed its connections (a rank that died a little later).
  if (socket_.get() >= 0) {
    if (shared_.unwatch) shared_.unwatch(socket_.get());
    (void)::shutdown(socket_.get(), SHUT_WR);
    closed_socket_ = std::move(socket_);
  }
  if (failure_.is_ok() && (started_ || !qps_.empty())) {
    fail(ErrorCode::aborted, "the connection was closed with this operation outstanding");
  }
}

}  // namespace braid::transport::ib
