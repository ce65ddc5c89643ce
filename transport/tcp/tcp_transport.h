// transport/tcp/tcp_transport.h - the tcp transport: listen/connect/accept and a poll loop over
// an engine (io_uring, or epoll where io_uring cannot be had).
//
// Connection setup is blocking-with-deadline on the calling thread and does not touch the
// engine; data transfer goes through the engine and is driven by poll() on the owner thread.
// Every socket is admitted only after the handshake of wire_format.h proved that both ends know
// the job's secret (TransportOptions::secret); connect() waits for its acceptor's answer, and
// accept() answers every socket that reaches the listener meanwhile (wire_format.h says why
// that order cannot deadlock). Connections must be destroyed before the transport.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/job_secret.h"
#include "transport/common/handshake.h"
#include "transport/common/handshake_queue.h"
#include "transport/common/host_identity.h"
#include "transport/common/socket_setup.h"
#include "transport/tcp/engine.h"
#include "transport/transport.h"
#include "transport/transport_options.h"

namespace braid::transport::tcp {

enum class EngineKind : uint8_t { io_uring, epoll };

// Sets up the engine; an io_uring failure carries the kernel's reason (ENOSYS under seccomp,
// EPERM with kernel.io_uring_disabled), so "auto" can say why it fell back.
Result<std::unique_ptr<Engine>> make_engine(EngineKind kind, const Env& env);

class TcpTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> create(const TransportOptions& options, EngineKind kind);

  const char* name() const override { return engine_->name(); }
  void set_spin_us(int us) override { engine_->set_spin_us(us); }
  std::string describe() const override;
  Capabilities capabilities() const override;
  bool is_host_local(const std::string& address) const override;
  Result<std::string> listen() override;
  Result<std::unique_ptr<Connection>> connect(const std::string& address, const PeerIdentity& who,
                                              Deadline deadline) override;
  Result<std::unique_ptr<Connection>> accept(const PeerIdentity& who, Deadline deadline) override;
  Status poll(std::vector<Completion>& out, std::chrono::microseconds timeout) override;
  void wake() override { engine_->wake(); }
  int wait_fd() const override { return engine_->wait_fd(); }

  EngineStats engine_stats() const { return engine_->stats(); }

 private:
  TcpTransport(const TransportOptions& options, std::unique_ptr<Engine> engine);
  int sockets_towards(const SocketAddress& to) const;
  Result<std::unique_ptr<Connection>> make_connection(const PeerIdentity& who, std::string address,
                                                      std::vector<UniqueFd> sockets, const HostIdentity& self_host,
                                                      const HostIdentity& peer_host);
  // One pass over the listener and the sockets in their handshake: accepts new ones, advances
  // each, files the authenticated ones in pending_. Waits at most until `deadline` (and 100 ms).
  Status serve_handshakes(const AcceptorExpect& expect, Deadline deadline);
  void refused(const AcceptorHandshake& h, int self_rank);

  // Sockets of a peer whose connection is not complete or not yet asked for by accept().
  struct Pending {
    uint64_t comm_id = 0;
    std::vector<UniqueFd> sockets;
    std::string address;
    HostIdentity self_host, peer_host;  // as exchanged on socket 0 (every socket carries the same)
  };

  Env env_;
  std::string master_addr_;
  std::string listen_host_;
  std::string interface_name_;
  int fewest_sockets_ = 0, most_sockets_ = 0;  // per peer, over the connections made
  std::unique_ptr<Engine> engine_;
  UniqueFd listen_fd_;
  std::string address_;
  std::map<int, Pending> pending_;  // by the connecting rank
  HandshakeQueue handshakes_;  // accepted sockets not yet authenticated
  auth::JobSecret secret_;
  // Refused sockets that claimed a rank (their hello was right, their proof was not), for the
  // message of an accept() that then times out waiting for that rank.
  struct RefusedClaim {
    size_t count = 0;
    std::string from, why;
  };
  std::map<int, RefusedClaim> refused_claims_;
  // Refusals are logged at most once per kRefusalLogInterval; the next line counts the rest.
  Clock::time_point refusal_logged_at_{};
  size_t refusals_unlogged_ = 0;
  std::vector<Completion> ready_;
};

}  // namespace braid::transport::tcp
