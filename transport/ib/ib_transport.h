// transport/ib/ib_transport.h - the ib transport: RC QPs over InfiniBand or RoCE (libibverbs).
//
// create() picks the device, port and GID (port_choice.h; BRAID_IB_HCA, BRAID_IB_GID_INDEX),
// opens the device and decides GPUDirect (gdr.h); it fails with the list of ports that exist
// when none is usable, so that a caller can fall back to tcp. listen() opens a small TCP
// listener (ib_bootstrap.h) on the interface tcp would use; the published address is that
// listener's "host:port" followed by "/device:port" (the second part only for messages).
// connect()/accept() authenticate the TCP socket, exchange connection cards (ib_wire.h), bring
// the QPs to RTS and keep the socket as the liveness channel; all bounded by the deadline.
//
// poll() drains every connection's CQ and moves their credits; with nothing ready it spins for
// as long as recent completions took to come (spin_budget.h; at least BRAID_SPIN_US, and only
// where common/spin.h allows), then arms the CQs and sleeps in epoll on the completion channel,
// an eventfd (wake()) and the liveness sockets, so an idle transport burns no CPU. Connections must be destroyed before the
// transport. Memory (memory_registry.h): post_* take plain host pointers; the registration
// cache registers each buffer once and keeps it, so needs_registration is false;
// register_memory pins a range (CUDA memory only with GPUDirect, through dma-buf) and
// deregister_memory drops it (call it before freeing memory that ib transfers used).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/ib/gdr.h"
#include "transport/ib/ib_bootstrap.h"
#include "transport/ib/ib_connection.h"
#include "transport/ib/memory_registry.h"
#include "transport/ib/port_choice.h"
#include "transport/ib/spin_budget.h"
#include "transport/ib/verbs.h"
#include "transport/transport.h"
#include "transport/transport_options.h"

namespace braid::transport::ib {

class IbTransport final : public Transport {
 public:
  static Result<std::unique_ptr<Transport>> create(const TransportOptions& options);
  ~IbTransport() override;

  const char* name() const override { return "ib"; }
  std::string describe() const override;
  Capabilities capabilities() const override;
  Result<std::string> listen() override;
  Result<std::unique_ptr<Connection>> connect(const std::string& address, const PeerIdentity& who,
                                              Deadline deadline) override;
  Result<std::unique_ptr<Connection>> accept(const PeerIdentity& who, Deadline deadline) override;
  Result<MemoryRegion> register_memory(void* base, size_t bytes, MemoryKind kind) override;
  void deregister_memory(const MemoryRegion& region) override;
  Status poll(std::vector<Completion>& out, std::chrono::microseconds timeout) override;
  void wake() override;
  void set_spin_us(int us) override { spin_ = SpinBudget(us); }

  // The host registration cache's counts (tests: no registration per operation).
  RegCache::Stats registration_stats() const { return memory_->host_stats(); }

  // How poll() has waited so far (tests and benchmarks: a wait for a completion that is near is
  // spent polling the CQs, not asleep on the completion channel).
  struct WaitStats {
    uint64_t polls = 0;         // poll() calls
    uint64_t spin_passes = 0;   // passes over the CQs while spinning for a completion
    uint64_t sleeps = 0;        // epoll_wait calls that could block (CQs armed first)
    uint64_t channel_events = 0;  // CQ events read from the completion channel
    uint64_t arms = 0;            // ibv_req_notify_cq calls (one per connection per sleep)
  };
  WaitStats wait_stats() const { return waits_; }
  // What the connections posted so far (ib_connection.h): doorbells and CTS per message.
  IbPostStats post_stats() const { return posts_; }

 private:
  explicit IbTransport(const TransportOptions& options);
  Status open(const TransportOptions& options);
  // Cards, QPs to RTS, the ready byte: a connection on `socket` that was just authenticated.
  Result<std::unique_ptr<Connection>> establish(const PeerIdentity& who, UniqueFd socket,
                                                const std::string& peer_address, Deadline deadline);
  // One round over every connection: CQs drained, credits moved. `now`: a clock reading just
  // taken, when the caller has one (else read only when needed).
  int pass(Clock::time_point now = {});
  Status sleep(std::chrono::microseconds timeout);
  void check_sockets(Clock::time_point now);
  void forget(IbConnection* c);

  Env env_;
  std::string master_addr_, listen_host_;
  std::string bootstrap_ip_, interface_name_;
  PortChoice port_;
  QpSettings qp_settings_;
  GdrDecision gdr_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<MemoryRegistry> memory_;
  std::unique_ptr<GdrFlusher> flush_;  // only when a flush can be due (gdr_flush.h)
  Bootstrap bootstrap_;
  std::string address_;
  std::vector<IbConnection*> connections_;
  std::vector<Completion> ready_;
  UniqueFd epoll_fd_, wake_fd_;
  Clock::time_point sockets_checked_{};
  WaitStats waits_;
  IbPostStats posts_;
  SpinBudget spin_;
};

}  // namespace braid::transport::ib
