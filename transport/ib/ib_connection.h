// transport/ib/ib_connection.h - one peer over RC QPs: the data path of cts_ring.h on verbs.
//
// A connection owns nqps RC QPs on one CQ of its own (which reports to the transport's
// completion channel), its rings (cts_ring.h: the CTS ring the peer writes into, the eager slots
// the peer writes into, and the local staging copies they are written from), and the bootstrap
// TCP socket, kept open only to learn of the peer's death (EOF).
//
// A pass (progress()) queues its writes and rings each QP's doorbell once at its end
// (write_batch.h). Every work request is signaled: a send completes when all its writes have, a receive when the
// immediates of its message have all arrived (and, for an eager message, it was copied out).
// Completions are reported in posting order per direction. A failure of any work request, or
// the peer's death, fails every outstanding operation with a message naming the operation, the
// peer and its address, the device and port, the verbs status and what to try, and moves the
// QPs to the error state so that the NIC touches none of the caller's buffers afterwards.
//
// Thread: the transport's owner only (transport.h).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/common/socket_setup.h"
#include "transport/ib/cts_hold.h"
#include "transport/ib/cts_ring.h"
#include "transport/ib/gdr_flusher.h"
#include "transport/ib/memory_registry.h"
#include "transport/ib/verbs.h"
#include "transport/ib/write_batch.h"
#include "transport/transport.h"

namespace braid::transport::ib {

// What the connections of a transport posted (tests and benchmarks: work per message). On
// Soft-RoCE every doorbell (ibv_post_send call) is a system call that runs the packet path.
struct IbPostStats {
  uint64_t doorbells = 0;      // ibv_post_send calls
  uint64_t work_requests = 0;  // the work requests they carried
  uint64_t messages = 0;       // messages whose writes were posted
  uint64_t cts_written = 0;    // clear-to-send entries
  uint64_t cts_overdue = 0;    // of those, written because a held-back one waited cts_hold.h's bound
  uint64_t cts_requests = 0;   // requests to send (RTS) written by a sender waiting for a CTS
  uint64_t passes = 0;         // passes that looked at the ledgers (a settled connection's are skipped)
};

// What a connection borrows from its transport, which outlives it.
struct IbShared {
  Device* device = nullptr;
  MemoryRegistry* memory = nullptr;
  std::vector<Completion>* ready = nullptr;  // where completions go
  QpSettings qp;
  uint32_t nqps = 1;
  std::function<void(class IbConnection*)> forget;  // called by the destructor
  std::function<void(int fd)> unwatch;              // before the liveness socket closes
  GdrFlusher* flush = nullptr;  // GPUDirect flush before a receive is reported (null: never due)
  IbPostStats* stats = nullptr;
};

class IbConnection final : public Connection {
 public:
  static constexpr uint32_t kSendDepth = 512;
  // Receive work requests per QP. A write with immediate consumes one; they are posted again
  // kRecvRepostBatch at a time, so up to kRecvRepostBatch - 1 fewer may be posted. Far more
  // than the writes a peer can have in flight here: its eager credits (kEagerSlots), the
  // receives advertised (kCtsEntries), their CTS entries and one request to send.
  static constexpr uint32_t kRecvDepth = 1024;
  static constexpr uint32_t kRecvRepostBatch = 16;
  static constexpr uint64_t kMinStripeBytes = 64 * 1024;

  // Creates the QPs and rings; the card describes them for the peer.
  static Result<std::unique_ptr<IbConnection>> create(const IbShared& shared, int self_rank, int peer_rank);
  ~IbConnection() override;

  ConnectionCard card() const;
  // Connects the QPs to the peer's (its card), and takes the bootstrap socket, already past
  // the ready exchange. `peer_address` is for messages.
  Status start(const ConnectionCard& peer, UniqueFd socket, std::string peer_address);

  Status post_send(const void* data, size_t bytes, uint64_t cookie) override;
  Status post_recv(void* data, size_t capacity, uint64_t cookie) override;
  void close() override;
  int peer_rank() const override { return peer_rank_; }
  const std::string& peer_address() const override { return peer_address_; }
  std::string stall_hint() const override;
  bool peer_ended() const override;

  // For the transport's poll(): drains the CQ (returns how many completions it took), moves
  // what credits allow, reports what finished; arm() asks for the next CQ event.
  int poll_cq();
  // `now`: a clock reading the caller just took, if it has one.
  void progress(Clock::time_point now = {});
  Status arm();
  // Before the transport sleeps: a message that waits for a CTS asks for it (cts_hold.h).
  void ask_before_sleep();
  // When a clear-to-send held back by progress() must go at the latest (the transport bounds
  // its sleep by it); nullopt when none is held back.
  std::optional<Clock::time_point> cts_due() const;
  // Reads the bootstrap socket after epoll said it is readable: EOF fails the connection.
  void check_socket();
  // For tests: how long a clear-to-send may be held back at most (CtsHold::kTimeout unless set).
  // Call before the first post.
  void set_cts_hold_bound(Clock::duration bound) { hold_.set_timeout(bound); }
  ibv_cq* cq() const { return cq_.get(); }
  int socket_fd() const { return socket_.get(); }
  bool failed() const { return !failure_.is_ok(); }

 private:
  struct Send {
    const void* data = nullptr;
    size_t bytes = 0;
    uint64_t cookie = 0;
    uint64_t seq = 0;
    bool started = false;
    uint32_t wrs_left = 0;
    int eager_slot = -1;
    Mr mr;
    bool has_mr = false;
  };

  IbConnection(const IbShared& shared, int self_rank, int peer_rank);
  void advance(Clock::time_point now);  // progress() without ringing the doorbells
  Status start_send(Send& s);  // queues its writes if credits and queue room allow
  Status advertise(RecvLedger::Receive& r);
  Status ask_for_cts(const Send& s);  // the request to send (RTS) for a message waiting on a CTS
  Status post_write(uint32_t qp, uint64_t wr_id, const void* local, uint64_t bytes, uint32_t lkey,
                    uint64_t remote, uint32_t rkey, uint32_t imm, bool inline_ok);
  Status post_recv_wrs(uint32_t qp, uint32_t n);  // n receive work requests on QP qp
  void on_wc(const ibv_wc& wc);
  void deliver();
  // Fails the connection: every outstanding operation completes with `why` (made per operation
  // by `message`), the QPs go to the error state. `warn`: say so at WARN (the runtime may be
  // waiting on another peer).
  void fail(ErrorCode code, const std::string& cause, bool warn = true);
  std::string op_prefix(bool is_send) const;
  void report(Completion c);
  void report_ok(uint64_t cookie, bool is_send, size_t bytes);  // a success: no Status to move
  // The peer said goodbye having received `received` messages whole and sent `peer_sent`.
  void peer_closed(uint64_t received, uint64_t peer_sent);
  void release(Mr& mr, bool& has);

  IbShared shared_;
  int self_rank_, peer_rank_;
  std::string peer_address_;
  CqPtr cq_;
  std::vector<QpPtr> qps_;
  std::vector<QpAddress> self_qps_;
  std::vector<uint32_t> sq_used_;
  std::vector<uint32_t> recv_owed_;  // per QP: receive work requests consumed, not yet posted again
  WriteBatch batch_;  // this pass's writes, posted at its end
  uint32_t max_inline_ = 0;
  RegisteredBuffer cts_ring_, cts_staging_, eager_ring_, eager_staging_;
  ConnectionCard peer_;
  UniqueFd socket_;
  UniqueFd closed_socket_;  // after close(): the bootstrap socket, shut down, for peer_ended()
  RecvLedger recv_;
  SendLedger send_ledger_;
  std::deque<Send> sends_;  // posted, in order, not yet reported
  std::map<uint64_t, Mr> recv_mrs_;  // by receive seq
  Status failure_;
  bool started_ = false;
  bool reporting_ = true;
  uint64_t sends_started_ = 0;  // messages whose writes are posted (the goodbye says how many)
  uint64_t cts_consumed_reported_ = 0;  // the eager count the latest CTS carried to the peer
  uint64_t asked_upto_ = 0;             // messages below this had their RTS written
  bool last_send_eager_ = false;        // the latest message started went eagerly
  bool asking_ = false;                 // within ask_before_sleep()
  // The last pass (advance()) posted and reported nothing, and no completion, post or request
  // came since: the next pass can only change something once a held-back CTS falls due.
  bool settled_ = false;
  uint64_t reports_ = 0;  // operations completed (reported or not: see reporting_)
  CtsHold hold_;
  bool peer_said_bye_ = false;  // the failure is the peer's goodbye: what it sent still completes
  unsigned char bye_[kByeBytes] = {};  // the peer's goodbye, as it arrives
  size_t bye_got_ = 0;
};

}  // namespace braid::transport::ib
