// collectives/executor.h - runs any Schedule on a rank's connections, re-entrantly.
//
// The executor owns no thread and never blocks: progress() posts every receive, reduction and
// send that may go now and returns; on_completion() takes what transport.poll() reported. The
// caller (runtime/links/peer_links.h's loop, for the progress engine and the collectives tests)
// alternates the two until done() or its deadline.
//
// Rules it enforces, so algorithms do not have to:
//   - Steps start in program order, at most `window` at a time: the window bounds memory
//     (landing slots for reductions) and lets receiving segment i+1 overlap reducing segment i.
//   - Data flow orders everything else: a step writes a range only after every earlier step
//     that reads or writes it has finished with it, and reads one only after earlier writers
//     are done (a write-after-read on the same range is how a send is protected from being
//     overwritten by a later receive).
//   - Sends to one peer are posted in program order (so are receives, by starting in order),
//     which is what pairs them with the peer's schedule over an in-order connection.
// Completions are matched to steps by cookie: op_id in the high 32 bits, the step index and
// a send bit below, so a stale completion of another operation is recognised and dropped.
//
// Lifetime: the send/recv buffers and the connections must outlive the executor; while
// outstanding() > 0 the transport may still write into the executor's landing slots or the
// caller's recv buffer, so a failed run must close those connections before letting go.
// Threading: one thread at a time (the connections' owner).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/types.h"
#include "collectives/buffer_pool.h"
#include "collectives/schedule.h"
#include "common/status.h"
#include "transport/transport.h"

namespace braid::collectives {

struct ExecutorOptions {
  std::string name = "collective";  // "all_reduce (ring)": every error starts "<name> on rank R: "
  int rank = 0;
  uint64_t op_id = 0;
  size_t window = 0;  // steps in flight; 0: the schedule's own; always >= 2
  DType dtype = DType::f32;
  Op op = Op::sum;    // never avg: algorithms reduce with sum and scale
};

class Executor {
 public:
  // Checks that every peer the schedule names has a connection and every range it touches has
  // a buffer, then allocates scratch and landing slots. The executor keeps the schedule's steps
  // (moved from an rvalue: one per operation, not copied).
  static Result<std::unique_ptr<Executor>> create(Schedule schedule, const void* send, void* recv,
                                                  const std::vector<transport::Connection*>& peers,
                                                  ExecutorOptions options);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Optional, before the first progress(): a small header travels in front of the first message
  // to each peer, and the header in front of each peer's first message is handed to `check`
  // before that message's data is used (the runtime's mismatch detection, runtime/engine/op_header.h).
  // A first message of at most kInlineHeaderMax bytes carries it inline, staged through a copy:
  // still one message, so a small operation pays no extra send or receive. A larger one gets it
  // as a message of its own just before it. Both sides decide alike from the message's size.
  // Where the schedule only receives from a peer (it only sends to us), a header-only message
  // goes back to it, so a rank that only sends (a broadcast root) still learns of a mismatch.
  // check(peer, data, bytes, status): data/bytes is what arrived (status: the receive's).
  static constexpr size_t kInlineHeaderMax = 64 << 10;
  using HeaderFor = std::function<const unsigned char*(int peer)>;
  using HeaderCheck = std::function<Status(int peer, const unsigned char* data, size_t bytes, const Status& status)>;
  // reverse = false skips the header-only replies: point-to-point sends and receives grouped
  // both ways on one connection (a sendrecv) would otherwise take each other's messages.
  void set_headers(size_t header_bytes, HeaderFor header_for, HeaderCheck check, bool reverse = true);

  // Runs the same schedule again, from the start, on new buffers under a new op id: for a caller
  // that keeps executors of operations it repeats (the runtime's, for a training loop's
  // collectives of one shape), so they are not rebuilt per call. The buffers must match the
  // schedule as the first ones did (null where they were null, the same one twice where the
  // operation was in place); headers stay set, and the buffers their first messages land in stay
  // taken. Only after done() with nothing outstanding.
  [[nodiscard]] Status rebind(const void* send, void* recv, uint64_t op_id);

  // Posts and computes whatever may go now. Never blocks.
  [[nodiscard]] Status progress();
  // Feeds one completion. Returns false (and does nothing) when its cookie is not ours.
  [[nodiscard]] Status on_completion(const transport::Completion& c, bool* ours = nullptr);
  bool done() const { return head_ == steps_.size() && header_ops_ == 0; }
  // Every send and receive this run will make has been handed to the transport: whatever is
  // posted on the same connections from now on queues behind all of it.
  bool all_posted() const;

  // Posted operations not yet completed, and the peers they are with.
  size_t outstanding() const { return outstanding_; }
  std::vector<int> busy_peers() const;
  // "rank 1 (10.0.0.2:4100) to send, rank 3 (...) to receive" - for timeout messages.
  std::string waiting_for() const;

  static uint64_t make_cookie(uint64_t op_id, size_t step, bool is_send) {
    return (op_id << 32) | (static_cast<uint64_t>(step) << 1) | (is_send ? 1u : 0u);
  }

 private:
  enum class Phase : uint8_t { idle, receiving, received, ready_send, sending, done };

  Executor(Schedule&& schedule, const void* send, void* recv, const std::vector<transport::Connection*>& peers,
           ExecutorOptions options);
  std::byte* at(const Range& r) const;
  bool write_blocked(size_t i, const Range& r) const;
  bool read_blocked(size_t i, const Range& r) const;
  Result<bool> try_start(size_t i);
  Result<bool> advance(size_t i);
  void compute(const Step& st, size_t i);
  Status fail(const std::string& what) const;
  std::string where() const;  // error_prefix(options_): "<name> on rank R: "
  Status post_first_send(size_t i, int peer, const std::byte* data, size_t bytes);
  Status post_first_recv(size_t i, int peer, std::byte* land, size_t bytes);
  Status on_header_completion(const transport::Completion& c, size_t index, bool is_send);
  Status post_reverse_headers();
  Status finish_first_recv(size_t index, const transport::Completion& c);
  std::string peer_name(int peer) const;

  std::vector<Step> steps_;
  std::vector<Phase> phase_;
  const std::byte* send_;
  std::byte* recv_;
  PooledBytes scratch_;
  PooledBytes slots_;
  size_t slot_bytes_ = 0;
  std::vector<transport::Connection*> peers_;
  ExecutorOptions options_;
  size_t window_ = 2;
  size_t head_ = 0;     // steps before it are done
  size_t started_ = 0;  // steps before it have started
  size_t outstanding_ = 0;

  // Headers (set_headers): per peer, the steps that carry them and the staging buffers.
  struct PeerHeader {
    size_t first_send = SIZE_MAX;
    size_t first_recv = SIZE_MAX;
    std::vector<std::byte> out;  // header + data (inline) or the header alone
    // A first receive takes up to header + kInlineHeaderMax bytes whatever it expects, so the
    // header of any first (or stale) message a disagreeing peer sends can still be read.
    PooledBytes in;
    std::byte* land = nullptr;   // where an inline first receive's data goes once checked
    bool header_recv_done = false;
  };
  size_t header_bytes_ = 0;
  size_t header_ops_ = 0;  // header-only messages posted and not completed
  bool reverse_posted_ = false;
  bool reverse_ = true;  // set_headers' `reverse`
  HeaderFor header_for_;
  HeaderCheck check_header_;
  std::vector<PeerHeader> headers_;
};

}  // namespace braid::collectives
