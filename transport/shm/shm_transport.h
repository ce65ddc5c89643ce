// transport/shm/shm_transport.h - the shm transport: ranks of one host talk through rings in
// shared memory (shm_connection.h, shm_layout.h).
//
// Setup: listen() binds an abstract unix socket under a random name (it lives in the network
// namespace, never in the file system, and vanishes with the process). connect() runs the tcp
// transport's authenticated handshake on it (transport/common/handshake.h: the job's secret,
// communicator id and ranks, both ways), then creates the segment, sends it with its eventfd
// (SCM_RIGHTS), takes the acceptor's eventfd back, probes whether it may read the acceptor's
// memory and says it has (so both ends know which path large messages take before the first). The acceptor serves every socket that
// reaches it while it waits in accept(), as tcp does (transport/common/handshake_format.h says why that order cannot
// deadlock); the pid of each end comes from the kernel (SO_PEERCRED), never from the peer's words.
//
// Waiting: poll() runs every connection's rings; with nothing done it spins for BRAID_SPIN_US
// (common/spin.h decides whether it may) - but when a peer last ran on this very CPU (each end
// publishes the CPU it polls on in the segment), that peer is queued behind the spinner and
// cannot answer: the spinner steps off to another CPU it may use, or, confined to this one,
// stops spinning - then marks itself asleep in every segment and sleeps
// in poll(2) on its eventfd, which peers and wake() write, and on every peer's pidfd.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/job_secret.h"
#include "transport/common/handshake.h"
#include "transport/common/handshake_queue.h"
#include "transport/shm/shm_connection.h"
#include "transport/shm/shm_setup.h"
#include "transport/transport.h"
#include "transport/transport_options.h"

namespace braid::transport::shm {


class ShmTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> create(const TransportOptions& options);
  ~ShmTransport() override;

  const char* name() const override { return "shm"; }
  std::string describe() const override;
  Capabilities capabilities() const override;
  bool is_host_local(const std::string& address) const override;
  Result<std::string> listen() override;
  Result<std::unique_ptr<Connection>> connect(const std::string& address, const PeerIdentity& who,
                                              Deadline deadline) override;
  Result<std::unique_ptr<Connection>> accept(const PeerIdentity& who, Deadline deadline) override;
  Status poll(std::vector<Completion>& out, std::chrono::microseconds timeout) override;
  // For tests: how often poll() found a peer queued on the spinner's CPU, and how often it then
  // stepped off that CPU (common/spin.h, step_off_cpu) rather than sleeping.
  uint64_t stacked_stops() const { return stacked_stops_; }
  uint64_t stacked_moves() const { return stacked_moves_; }
  void wake() override;
  // The eventfd peers and wake() write; armed by arm_wait() (runtime/links/peer_links.h sleeps on
  // several transports at once).
  int wait_fd() const override { return eventfd_.get(); }
  bool arm_wait() override;
  void set_spin_us(int us) override { env_.spin_us = us; }

  // Called by a connection as it goes away.
  void forget(ShmConnection* c);

 private:
  ShmTransport(const TransportOptions& options, UniqueFd eventfd);
  Status serve_handshakes(const AcceptorExpect& expect, Deadline deadline);
  // The acceptor's side of the setup after an authenticated handshake; fills pending_.
  Status finish_accepted(AcceptorHandshake& h, Deadline deadline);
  std::unique_ptr<Connection> make_connection(ShmConnectionSetup setup);
  bool progress_all();
  // Publishes this thread's CPU to every peer; true when some peer last polled on the same CPU.
  bool peer_on_this_cpu();
  uint64_t stacked_stops_ = 0;
  uint64_t stacked_moves_ = 0;
  Status sleep(std::chrono::microseconds timeout);

  Env env_;
  auth::JobSecret secret_;
  UniqueFd eventfd_;
  UniqueFd listen_fd_;
  std::string address_;
  size_t ring_bytes_;  // BRAID_SHM_RING_BYTES: what connect() asks for
  CmaPolicy cma_;       // BRAID_SHM_CMA
  HugePageQuery pages_;
  size_t smallest_ring_ = 0;  // over the connections made (0: none yet)
  HandshakeQueue handshakes_;
  std::map<int, ShmConnectionSetup> pending_;  // by the connecting rank
  std::map<int, uint64_t> pending_comm_;
  std::vector<ShmConnection*> connections_;
  std::vector<Completion> ready_;
  bool armed_ = false;  // arm_wait() marked the connections asleep; the next poll() undoes it
};

}  // namespace braid::transport::shm
