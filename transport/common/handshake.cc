#include "transport/common/handshake.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace braid::transport {

namespace {

auth::Mac read_mac(const unsigned char* in) {
  auth::Mac m;
  std::memcpy(m.data(), in, m.size());
  return m;
}

}  // namespace

Result<HostIdentity> connector_handshake(int fd, Handshake hello, const auth::JobSecret& secret, Deadline deadline) {
  hello.nonce = auth::fresh_nonce();
  unsigned char out[kHandshakeBytes];
  encode(hello, out);
  RETURN_IF_ERROR(write_exact(fd, out, sizeof out, deadline));

  Result<Handshake> got = read_handshake(fd, deadline);
  if (!got.is_ok()) {
    const Status& s = got.status();
    if (s.code() == ErrorCode::peer_lost) {
      return peer_lost("it closed the connection without answering our handshake: it refused it (another job or "
                       "communicator at that address, or a braid version before 3? its log says why)");
    }
    if (s.code() == ErrorCode::timeout) {
      return timeout_error("it accepted the connection but did not answer our handshake by the deadline (is "
                           "another program listening there? a braid rank answers within milliseconds once it "
                           "waits for its connections)");
    }
    return Status(s.code(), "bad answer to our handshake: " + s.message());
  }
  const Handshake answer = got.value();
  unsigned char proof_in[kProofBytes];
  RETURN_IF_ERROR(read_exact(fd, proof_in, sizeof proof_in, deadline));
  Status st = check_handshake(answer, hello.comm_id, hello.from_rank);
  if (st.is_ok() && (answer.from_rank != hello.to_rank || answer.socket_index != hello.socket_index ||
                     answer.nsocks != hello.nsocks)) {
    st = protocol_error("sent by rank " + std::to_string(answer.from_rank) + " for socket " +
                        std::to_string(answer.socket_index) + " of " + std::to_string(answer.nsocks) +
                        ", expected rank " + std::to_string(hello.to_rank) + " socket " +
                        std::to_string(hello.socket_index) + " of " + std::to_string(hello.nsocks));
  }
  if (!st.is_ok()) {
    return protocol_error("bad answer to our handshake: " + st.message() + " (is another program listening there?)");
  }
  const std::string transcript = handshake_transcript(hello, answer);
  if (!secret.verify(auth::Direction::to_connector, hello.nonce, answer.nonce, transcript, read_mac(proof_in))) {
    return Status(ErrorCode::unauthenticated,
                  std::string("could not prove that it knows this job's secret (this rank's secret: ") +
                      secret.source() + "), so the two secrets differ, or a stranger answers at that address");
  }
  const auth::Mac proof = secret.prove(auth::Direction::to_acceptor, answer.nonce, hello.nonce, transcript);
  RETURN_IF_ERROR(write_exact(fd, proof.data(), proof.size(), deadline));
  return HostIdentity{answer.boot_id, answer.cpu_mask};
}

AcceptorHandshake::AcceptorHandshake(UniqueFd fd, std::string from, Deadline deadline)
    : fd_(std::move(fd)), from_(std::move(from)), deadline_(deadline) {}

AcceptorHandshake::Step AcceptorHandshake::refuse(Status why) {
  state_ = State::finished;
  why_ = std::move(why);
  return Step::refused;
}

AcceptorHandshake::Step AcceptorHandshake::expire() {
  if (state_ == State::finished) return Step::refused;
  const size_t want = state_ == State::hello ? kHandshakeBytes : kProofBytes;
  return refuse(timeout_error("sent " + std::to_string(got_) + " of the " + std::to_string(want) + " bytes of its " +
                              (state_ == State::hello ? "handshake" : "proof") + " within " +
                              std::to_string(kHandshakeTimeout.count()) + " ms"));
}

AcceptorHandshake::Step AcceptorHandshake::advance(const AcceptorExpect& expect, const auth::JobSecret& secret) {
  if (state_ == State::finished) return why_.is_ok() ? Step::done : Step::refused;
  for (;;) {
    const size_t want = state_ == State::hello ? kHandshakeBytes : kProofBytes;
    // Exactly what this step needs: on a good socket the first frame follows the proof.
    ssize_t n = ::recv(fd_.get(), buf_ + got_, want - got_, MSG_DONTWAIT);
    if (n == 0) {
      if (state_ == State::proof && got_ == 0) {
        return refuse(Status(ErrorCode::unauthenticated,
                             "it closed the connection instead of proving it knows the job's secret: our proof "
                             "did not verify for it, so it has another secret, or none"));
      }
      return refuse(peer_lost("closed the connection after " + std::to_string(got_) + " bytes of its " +
                              (state_ == State::hello ? "handshake" : "proof")));
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Step::more;
      return refuse(system_error("recv", errno));
    }
    got_ += static_cast<size_t>(n);
    if (state_ == State::hello && got_ >= kHandshakePrefixBytes) {
      // Magic and version first: another protocol is refused before its body is waited for.
      Status st = check_magic_and_version(decode_handshake(buf_));  // only its first bytes count
      if (!st.is_ok()) return refuse(st);
    }
    if (got_ < want) continue;
    got_ = 0;
    if (state_ == State::hello) {
      hello_ = decode_handshake(buf_);
      Status st = check_handshake(hello_, expect.comm_id, expect.self_rank);
      if (!st.is_ok()) return refuse(st);
      answer_ = hello_;
      answer_.from_rank = hello_.to_rank;
      answer_.to_rank = hello_.from_rank;
      answer_.boot_id = expect.self_host.boot_id;
      answer_.cpu_mask = expect.self_host.cpus;
      answer_.nonce = auth::fresh_nonce();
      const auth::Mac proof = secret.prove(auth::Direction::to_connector, hello_.nonce, answer_.nonce,
                                           handshake_transcript(hello_, answer_));
      unsigned char out[kAnswerBytes];
      encode(answer_, out);
      std::memcpy(out + kHandshakeBytes, proof.data(), proof.size());
      // A fresh socket's send buffer is empty and far larger than this: the kernel takes it whole.
      ssize_t sent = ::send(fd_.get(), out, sizeof out, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (sent != static_cast<ssize_t>(sizeof out)) {
        return refuse(system_error("answering its handshake", sent < 0 ? errno : EAGAIN));
      }
      state_ = State::proof;
      hello_checked_ = true;
      continue;
    }
    const std::string transcript = handshake_transcript(hello_, answer_);
    if (!secret.verify(auth::Direction::to_acceptor, answer_.nonce, hello_.nonce, transcript, read_mac(buf_))) {
      return refuse(Status(ErrorCode::unauthenticated, "its proof of the job's secret is wrong (it has another "
                                                       "secret, or none, or is not a rank of this job)"));
    }
    state_ = State::finished;
    return Step::done;
  }
}

}  // namespace braid::transport
