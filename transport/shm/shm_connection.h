// transport/shm/shm_connection.h - one connection between two ranks of one host: two byte rings
// in a shared segment (shm_layout.h), driven by the transport's poll().
//
// Sends are written into the outgoing ring in order. A message goes as a cma record (the
// receiver copies it straight from our buffer with process_vm_readv) when the peer found at
// setup that it may read our memory and the policy (CmaPolicy, from BRAID_SHM_CMA) picks it,
// and through the ring otherwise (a two-part message, post_send_parts, always through the ring,
// its parts copied one after the other into one record). Inline sends complete once their last byte is in the ring;
// cma sends once the peer counted them read; completions keep the order of posting.
// Receives take records in order; a record larger than the posted buffer is consumed and the
// receive fails with ErrorCode::protocol. A cma record is read in pieces of kCmaPieceBytes, one
// per progress() call, so that one large message does not hold up the transport's other peers.
//
// Liveness: the peer's pidfd (or, where pidfds are missing, the unix socket of the setup, which
// the kernel closes when the peer exits). A peer that died or closed fails every outstanding
// operation with ErrorCode::peer_lost, after what it had fully written has been delivered.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "transport/shm/fifo.h"
#include "transport/shm/huge_pages.h"
#include "transport/shm/page_collapse.h"
#include "transport/shm/shm_layout.h"
#include "transport/shm/shm_setup.h"
#include "transport/shm/small_copy.h"
#include "transport/transport.h"

namespace braid::transport::shm {

class ShmConnection;

inline constexpr size_t kCmaMinBytes = 64 * 1024;
inline constexpr size_t kCmaPieceBytes = size_t{2} << 20;

// Which messages go single-copy. huge_pages: those larger than the ring enough of whose bytes
// lie on huge pages, or can be moved onto them (once: page_collapse.h; huge_pages.h says why);
// below the ring's size the ring holds the whole message, so the send completes without
// waiting for the reader. always: every message from kCmaMinBytes, whatever its pages.
enum class CmaPolicy { off, huge_pages, always };

struct ShmConnectionSetup {
  Mapping segment;
  UniqueFd socket;        // the setup's unix socket, kept: liveness without pidfds
  UniqueFd peer_eventfd;  // written to wake the peer
  pid_t peer_pid = 0;
  int self_end = 0;       // 0: connector, 1: acceptor
  int self_rank = 0, peer_rank = 0;
  std::string peer_address;
  std::vector<Completion>* completions = nullptr;
  std::function<void(ShmConnection*)> forget;  // the transport's, called on destruction
  CmaPolicy cma = CmaPolicy::off;
  const HugePageQuery* pages = nullptr;  // the transport's; needed for CmaPolicy::huge_pages
  PageCollapse* collapse = nullptr;      // the transport's; null: buffers are never collapsed
};

class ShmConnection final : public Connection {
 public:
  static constexpr size_t kMaxInFlight = 4096;
  // Bytes moved between two publications of a counter: the peer starts copying the first part
  // of a large message while the rest is still being written. A message up to this size goes
  // into the ring, and out of it, in one piece when it fits (write_whole, take_whole).
  static constexpr size_t kChunkBytes = 64 * 1024;
  // Two-part messages always go through the ring (no single copy from two buffers): only those
  // below the size from which a message may go single-copy.
  static constexpr size_t kMaxPartsBytes = kCmaMinBytes - 1;

  explicit ShmConnection(ShmConnectionSetup setup);
  ~ShmConnection() override;

  Status post_send(const void* data, size_t bytes, uint64_t cookie) override;
  Status post_recv(void* data, size_t capacity, uint64_t cookie) override;
  Status post_send_parts(const void* head, size_t head_bytes, const void* data, size_t bytes, uint64_t cookie) override;
  void close() override;
  int peer_rank() const override { return s_.peer_rank; }
  const std::string& peer_address() const override { return s_.peer_address; }
  std::string stall_hint() const override;
  bool peer_ended() const override;
  Capabilities capabilities() const override {
    Capabilities c;  // as ShmTransport::capabilities()
    c.max_in_flight = kMaxInFlight;
    c.max_parts_bytes = kMaxPartsBytes;
    return c;
  }

  // For the transport's poll: moves what can move; true when any counter or operation changed.
  // Inline, so that the transport's poll runs its usual cases without a call: the look while
  // waiting (nothing of ours to write or to see acknowledged, no record half read, the peer
  // still there, and nothing new in the incoming ring or no receive posted for what is there:
  // nothing would move), and a message that came while nothing of ours is under way, whose
  // whole records go to their receives at once (take_whole_records). What they leave, the
  // general walk reads, a peer that closed included.
  bool progress() {
    if (closed_) return false;
    if (sends_.empty() && acks_.empty() && !in_record_ && !peer_gone_ &&
        peer_end_->closed.load(std::memory_order_acquire) == 0) {
      const uint64_t tail = in_ctl_->tail.load(std::memory_order_acquire);
      if (tail == head_ || recvs_.empty()) {
        ++quiet_looks_;
        return false;
      }
      if (take_whole_records(tail)) {
        notify_peer();
        return true;
      }
    }
    return walk();
  }
  // Whether the peer may read our memory (so large sends go single-copy), as it found at setup.
  bool peer_reads_us() const;
  // Why the peer could not read our memory at setup (an errno of process_vm_readv), or 0.
  int peer_probe_errno() const;
  // Whether a send of `bytes` from `data` goes single-copy (cross-memory attach); may collapse
  // the buffer onto huge pages first (CmaPolicy::huge_pages, page_collapse.h).
  bool single_copy(const void* data, size_t bytes);
  // Messages sent single-copy so far (tests read it).
  uint64_t cma_sent() const { return cma_sent_; }
  // Small messages written into the ring, and read out of it, in one piece (write_whole,
  // take_whole; tests read them).
  uint64_t whole_written() const { return whole_written_; }
  uint64_t whole_read() const { return whole_read_; }
  // progress() calls that found nothing to do at a glance (tests read it).
  uint64_t quiet_looks() const { return quiet_looks_; }
  // progress() calls that went on to the general walk (walk(): write_sends, read_records), past
  // its first look and the whole-record path (tests read it).
  uint64_t walks() const { return walks_; }
  // Where in its lap of the outgoing ring the next record goes (tests read it).
  uint64_t lap_offset() const { return tail_ % ring_; }
  // The descriptor that becomes readable when the peer exits (pidfd or socket).
  int liveness_fd() const { return liveness_fd_; }
  // The peer exited: fail what is left once what it wrote is delivered.
  void peer_exited();
  void set_sleeping(bool on);
  // Publishes the CPU this end polls on (sched_getcpu() + 1) and says whether the peer last
  // polled on the same one: it is then runnable only once this thread gives the CPU away.
  bool peer_on_cpu(uint32_t cpu_plus_one) {
    std::atomic<uint32_t>& mine = header_->ends[s_.self_end].on_cpu;
    if (mine.load(std::memory_order_relaxed) != cpu_plus_one) mine.store(cpu_plus_one, std::memory_order_relaxed);
    return peer_end_->on_cpu.load(std::memory_order_relaxed) == cpu_plus_one;
  }
  bool idle() const { return sends_.empty() && acks_.empty() && recvs_.empty(); }
  // A single-copy message is partly read: the next progress() reads on, so do not sleep.
  bool mid_message() const {
    return !closed_ && in_record_ && cur_.kind == RecordKind::cma && !recv_done_ && broken_.is_ok();
  }
  // The transport goes first (a misuse transport.h forbids): no call back into it.
  void detach() {
    s_.forget = nullptr;
    s_.completions = nullptr;
    s_.pages = nullptr;
    s_.collapse = nullptr;
  }

 private:
  struct Send {
    const unsigned char* data;
    size_t len;  // the whole message: head_len bytes at head, then the rest at data
    uint64_t cookie;
    bool cma;
    size_t written = 0;  // bytes of its record in the ring
    uint64_t cma_index = 0;
    const unsigned char* head = nullptr;  // a two-part message's first part (post_send_parts)
    size_t head_len = 0;
  };
  struct Recv {
    unsigned char* data;
    size_t capacity;
    uint64_t cookie;
  };

  // Whether a send of `bytes` may go straight into the ring (write_whole) without the checks and
  // the queue of queue_send: below the single-copy size, nothing queued ahead of it, room to
  // note it behind single-copy sends still being read, and the connection sound.
  bool may_write_at_once(size_t bytes) const {
    static_assert(kCmaMinBytes <= kChunkBytes, "a message below the single-copy size fits one piece");
    return bytes < kCmaMinBytes && sends_.empty() && acks_.size() < kMaxInFlight && !closed_ && broken_.is_ok();
  }
  // What post_send and post_send_parts share when the message cannot go at once: checks, then
  // queues `s` (single-copy when may_copy_once and single_copy() says so) and writes it when
  // nothing is ahead of it.
  Status queue_send(const Send& send, bool may_copy_once);
  // A message below the single-copy size, straight into the ring when it may (write_whole),
  // else through queue_send. Out of line: post_send and post_send_parts end in a call to it.
  [[gnu::noinline]] Status send_small(const unsigned char* head, size_t head_len, const unsigned char* data, size_t len,
                                      uint64_t cookie);
  // The rare answers, out of line so that the usual paths carry none of their code.
  [[gnu::noinline, gnu::cold]] Status parts_too_large(size_t len) const;
  [[gnu::noinline, gnu::cold]] Status post_recv_rarely(void* data, size_t capacity, uint64_t cookie);
  bool write_sends();
  // A message of `len` bytes (its first head_len at head, the rest at data) as one record, when
  // it fits in one piece now; false: nothing was written.
  bool write_whole(const unsigned char* head, size_t head_len, const unsigned char* data, size_t len, uint64_t cookie);
  // n bytes of `s`'s message from byte `from` on, into the ring at pos.
  void copy_message(uint64_t pos, const Send& s, size_t from, size_t n);
  bool wrap_fits(uint64_t total);
  void write_wrap(uint64_t at);
  bool walk();
  bool read_records();
  bool take_whole(uint64_t at, uint64_t avail);  // at: head_ % ring_
  // Whole inline records, each into the next posted receive, while they have arrived (up to
  // `tail`); true when one or more were taken (the head is then published).
  bool take_whole_records(uint64_t tail);
  bool read_cma_piece();
  Status cma_read_error(int err);
  bool collect_acks();
  void copy_in(uint64_t pos, const void* src, size_t n);
  void copy_out(uint64_t pos, void* dst, size_t n) const;
  void complete(bool is_send, uint64_t cookie, size_t bytes, Status st);
  void complete_ok(bool is_send, uint64_t cookie, size_t bytes);  // the usual one: no Status passed along
  void fail_all(const Status& st);
  void notify_peer();
  void wake_peer();  // writes the sleeping peer's eventfd
  std::string who() const;  // "rank 0 from/to rank 1 (pid 123, shm:...)"
  Status lost_status(const char* op) const;

  ShmConnectionSetup s_;
  SegmentHeader* header_ = nullptr;
  Endpoint* peer_end_ = nullptr;  // the peer's flags in the segment's header
  RingControl* out_ctl_ = nullptr;
  RingControl* in_ctl_ = nullptr;
  unsigned char* out_data_ = nullptr;
  unsigned char* in_data_ = nullptr;
  uint64_t ring_ = 0;
  UniqueFd pidfd_;
  int liveness_fd_ = -1;

  Fifo<Send> sends_;  // not yet wholly in the ring, in order
  Fifo<Send> acks_;   // wholly written, waiting for the peer's count of cma reads
  Fifo<Recv> recvs_;
  uint64_t tail_ = 0;       // our outgoing tail (we alone write it)
  uint64_t head_ = 0;       // our incoming head (we alone write it)
  uint64_t send_seq_ = 0, recv_seq_ = 0, cma_sent_ = 0;
  uint64_t whole_written_ = 0, whole_read_ = 0, quiet_looks_ = 0, walks_ = 0;
  // The record being read: its header and how many of its bytes were consumed.
  bool in_record_ = false;
  bool recv_done_ = false;  // its receive already completed (only padding is left)
  RecordHeader cur_{};
  uint64_t cur_read_ = 0;
  uint64_t cma_copied_ = 0;  // a cma record: bytes of its message read so far
  bool closed_ = false;
  bool peer_gone_ = false;
  Status broken_;  // set once the connection failed; later posts fail with it
};

// The usual receive (progress() calls it when nothing of ours is queued and no record is half
// read): each record that has wholly arrived, inline, in one piece before the ring's end, with
// the number due and a posted receive large enough, goes to that receive in one copy, as
// take_whole takes it; a wrap record sends it on to the next lap. The first record that is not
// so is left to read_records, which reads it piecewise or reports what is wrong with it. Always
// inline: the transport's poll loop runs it without a call (used in several places, it would
// otherwise be kept out of line).
[[gnu::always_inline]] inline bool ShmConnection::take_whole_records(uint64_t tail) {
  const uint64_t first = head_;
  while (!recvs_.empty() && tail - head_ >= kRecordHeaderBytes) {
    const uint64_t at = head_ % ring_;
    // Each field read once (the peer could change the bytes meanwhile); checked before use.
    const unsigned char* record = in_data_ + at;
    uint64_t len, seq;
    RecordKind kind;
    std::memcpy(&len, record + offsetof(RecordHeader, len), sizeof len);
    std::memcpy(&kind, record + offsetof(RecordHeader, kind), sizeof kind);
    std::memcpy(&seq, record + offsetof(RecordHeader, seq), sizeof seq);
    if (kind == RecordKind::wrap && seq == recv_seq_ && at != 0) {  // the next record starts the next lap
      head_ += ring_ - at;
      continue;
    }
    const uint64_t total = record_bytes(len);
    const Recv& r = recvs_.front();
    if (kind != RecordKind::inline_data || seq != recv_seq_ || len > kChunkBytes || len > r.capacity ||
        tail - head_ < total || at + total > ring_) {
      break;
    }
    copy_bytes(r.data, record + kRecordHeaderBytes, len);
    head_ += total;
    ++recv_seq_;
    ++whole_read_;
    complete_ok(false, r.cookie, len);
    recvs_.pop_front();
  }
  if (head_ == first) return false;
  in_ctl_->head.store(head_, std::memory_order_release);
  return true;
}

inline void ShmConnection::complete_ok(bool is_send, uint64_t cookie, size_t bytes) {
  if (s_.completions == nullptr) return;
  s_.completions->push_back(Completion{this, cookie, is_send, bytes, Status()});
}

inline void ShmConnection::notify_peer() {
  // Pairs with the fence in set_sleeping: either the sleeper sees our counters, or we its flag.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (peer_end_->sleeping.load(std::memory_order_relaxed) != 0) wake_peer();
}

}  // namespace braid::transport::shm
