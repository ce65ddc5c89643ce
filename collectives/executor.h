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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/types.h"
#include "collectives/buffer_pool.h"
#include "collectives/header_framing.h"
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
  // to each peer, and the header in front of each peer's first message is handed to
  // source.check() before that message's data is used (collectives/header_framing.h says how it travels).
  static constexpr size_t kInlineHeaderMax = HeaderFraming::kInlineHeaderMax;
  // reverse = false skips the header-only replies: point-to-point sends and receives grouped
  // both ways on one connection (a sendrecv) would otherwise take each other's messages.
  // `source` gives the headers and checks them; it must outlive the executor.
  void set_headers(size_t header_bytes, const HeaderSource& source, bool reverse = true);

  // Runs the same schedule again, from the start, on new buffers under a new op id: for a caller
  // that keeps executors of operations it repeats (the runtime's, for a training loop's
  // collectives of one shape), so they are not rebuilt per call. The buffers must match the
  // schedule as the first ones did (null where they were null, the same one twice where the
  // operation was in place); headers stay set, and the buffers their first messages land in stay
  // taken. Only after done() with nothing outstanding.
  [[nodiscard]] Status rebind(const void* send, void* recv, uint64_t op_id);

  // Posts and computes whatever may go now. Never blocks. Between two completions only the
  // first call does anything: what may go changes only when a completion comes in.
  [[nodiscard]] Status progress() { return settled_ ? Status::ok() : progress_now(); }
  // Feeds one completion. Returns false (and does nothing) when its cookie is not ours. Another
  // operation's is told at a glance, here: a group's runs are each offered every completion.
  [[nodiscard]] Status on_completion(const transport::Completion& c, bool* ours = nullptr) {
    if ((c.cookie >> 32) != (options_.op_id & 0xffffffffu)) {
      if (ours != nullptr) *ours = false;
      return Status::ok();
    }
    return take(c, ours);
  }
  bool done() const { return head_ == steps_.size() && (!framing_ || framing_->ops() == 0); }
  // Every send and receive this run will make has been handed to the transport: whatever is
  // posted on the same connections from now on queues behind all of it.
  bool all_posted() const;

  // Posted operations not yet completed, and the peers they are with.
  size_t outstanding() const { return outstanding_; }
  std::vector<int> busy_peers() const;
  // "rank 1 (10.0.0.2:4100) to send, rank 3 (...) to receive" - for timeout messages.
  std::string waiting_for() const;

  // Steps progress()'s sweeps have looked at so far, over every run (tests count them: a call
  // with nothing new to do looks at none). A straight run (below) makes no sweeps.
  uint64_t visits() const { return visits_; }
  // Runs through the straight path: set_headers found a schedule of at most a send and a
  // receive (collectives/executor.cc says which), the runtime's small operations of two ranks.
  bool straight() const { return straight_; }

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
  // What try_start and advance did with a step: the usual answers in one byte, a failure's
  // Status kept in failure_ (posts fail rarely; progress() returns it).
  enum class Went : uint8_t { no, yes, failed };
  Went try_start(size_t i);
  Went advance(size_t i);
  Went post_send(size_t i);  // advance's last part: step i's send, in program order
  Status progress_now();  // progress() with something new since the last call
  Status progress_straight();
  Went failed(const Status& s);  // failure_ = s with where() in front
  void compute(const Step& st, size_t i);
  Status fail(const std::string& what) const;
  std::string where() const;  // error_prefix(options_): "<name> on rank R: "
  // set_headers was called with a header of some bytes.
  bool framed() const { return framed_; }
  Status finish_first_recv(size_t index, const transport::Completion& c);
  // on_completion() for a completion under this run's op id.
  Status take(const transport::Completion& c, bool* ours);
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
  bool settled_ = false;  // progress() found nothing more to do, and no completion came since
  uint64_t visits_ = 0;
  Status failure_;  // Went::failed's reason, until progress() returns it

  std::optional<HeaderFraming> framing_;  // set_headers
  bool framed_ = false;                   // framing_ with a header of some bytes
  // The straight path (set_headers): the send's step and the receive's, -1 where there is none.
  bool straight_ = false;
  int send_step_ = -1;
  int recv_step_ = -1;
};

}  // namespace braid::collectives
