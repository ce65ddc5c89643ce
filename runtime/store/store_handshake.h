// runtime/store/store_handshake.h - both sides of a store connection's handshake, without sockets.
//
// The bytes are in store_protocol.h; the proofs come from common/job_secret.h. The server makes
// a ServerHandshake per accepted connection, sends hello_frame() and hands the client's answer
// to on_answer(); the client makes a ClientHandshake, hands it the hello and the verdict. Neither
// ever allocates more than the body it is given, which the caller has bounded by
// kMaxHandshakeBytes.
#pragma once

#include <string>
#include <string_view>

#include "common/job_secret.h"
#include "common/status.h"

namespace braid::store {

// What proofs are bound to: this protocol and both job ids.
std::string handshake_transcript(std::string_view server_job_id, std::string_view client_job_id);

class ServerHandshake {
 public:
  // `secret` and `job_id` belong to the server and must outlive this object.
  ServerHandshake(const auth::JobSecret& secret, const std::string& job_id, uint16_t port);

  // The hello frame (length prefix included).
  std::string hello_frame() const;

  struct Verdict {
    std::string frame;  // to send: ok with the server's proof, or an error
    Status status;      // ok, or why the client was refused (for the server's log)
  };
  // Judges the client's answer body. `peer` names the client in messages ("127.0.0.1:40312").
  Verdict on_answer(std::string_view body, const std::string& peer) const;

 private:
  const auth::JobSecret& secret_;
  const std::string& job_id_;
  uint16_t port_;
  auth::Nonce nonce_;
};

class ClientHandshake {
 public:
  // `address` is the store's "host:port", for messages.
  ClientHandshake(const auth::JobSecret& secret, std::string job_id, std::string address, uint16_t port);

  // Reads the hello; returns the answer frame to send. Fails (ErrorCode::protocol) when the
  // bytes are not a braid store's hello.
  Result<std::string> on_hello(std::string_view body);
  // Reads the verdict. Fails with ErrorCode::unauthenticated when either side's proof is
  // refused, ErrorCode::invalid_argument when the store belongs to another job.
  Status on_verdict(std::string_view body) const;
  // Why this client refuses the server whatever the verdict says (another job's store), or ok.
  const Status& refusal() const { return refusal_; }

 private:
  const auth::JobSecret& secret_;
  std::string job_id_;
  std::string address_;
  uint16_t port_;
  auth::Nonce nonce_;
  auth::Nonce server_nonce_{};
  bool server_has_secret_ = false;
  std::string server_job_id_;
  Status refusal_;
};

}  // namespace braid::store
