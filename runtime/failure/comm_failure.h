// runtime/failure/comm_failure.h - a communicator's failure state: what a rank does when an
// operation fails, when it learns that another rank failed, and when abort() is called.
//
// The first failed operation ends the communicator (see failure_board.h). The rank that found
// the failure writes it to the store, then closes every connection, so peers blocked on it fail
// at once and name the real reason; every later operation fails fast with the original Status.
// abort() does the same on request, from any thread. A timeout gathers every rank's progress
// into a report that names the rank to blame.
//
// Threading: state(), failure(), abort_requested(), fail_fast_status() and request_abort() from
// any thread; the rest only from the thread that holds the engine (op_queue.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/communicator.h"
#include "common/mutex.h"
#include "common/status.h"
#include "runtime/communicator_config.h"
#include "runtime/engine/op_label.h"
#include "runtime/failure/failure_board.h"
#include "runtime/links/comm_links.h"

namespace braid {

class OpRun;

class CommFailure {
 public:
  // Both outlive this.
  CommFailure(const CommunicatorConfig& cfg, CommLinks& links);
  CommFailure(const CommFailure&) = delete;
  CommFailure& operator=(const CommFailure&) = delete;

  CommState state() const { return state_.load(std::memory_order_acquire); }
  // The reason state() is not ok.
  Status failure() const EXCLUDES(state_mu_);
  bool abort_requested() const { return abort_requested_.load(); }
  // An abort was asked for and not handled yet.
  bool abort_pending() const { return abort_requested() && state() == CommState::ok; }
  // Why `what` (an operation's label) is refused: the communicator failed or was aborted.
  Status fail_fast_status(const std::string& what) const EXCLUDES(state_mu_);

  // abort(), first part: records the reason (the first one given) and asks the engine to stop.
  void request_abort(const std::string& reason) EXCLUDES(state_mu_);
  // abort(), last part: waits (bounded) until the engine handled it.
  void wait_until_ended() EXCLUDES(state_mu_);
  // The engine's part of an abort, between operations: tells the other ranks, closes the links.
  void handle_abort() EXCLUDES(state_mu_);

  // An operation failed with `s` while `runs` were driven: learns or publishes the reason, builds
  // the report a timeout needs, closes the links and ends the communicator. Returns the Status
  // every unfinished operation completes with.
  Status on_failure(Status s, const std::string& what, uint64_t seq, const std::vector<OpRun*>& runs,
                    std::optional<Failure> adopted) EXCLUDES(state_mu_);
  // The idle progress thread, once a second: another rank's failure ends this communicator too.
  void idle_check() EXCLUDES(state_mu_);
  // Closing every connection (not only the busy ones) is what tells peers blocked on this rank,
  // at once, that something happened; the board tells them what. Then `runs` get what the
  // transport hands back, so their buffers may be freed.
  void close_connections(const std::vector<OpRun*>& runs);

  // The failure board that running operations read (RunSet).
  FailureBoard& board() { return board_; }
  // The first peer whose connection failed while operations ran, for failure reports.
  void note_failed_peer(int peer) {
    if (failed_peer_ < 0) failed_peer_ = peer;
  }
  // The peers whose end of the connection was gone (transport::Connection::peer_ended) when
  // this rank closed its connections, in rank order: dead, or survivors that closed on purpose
  // (the failure board's closing marks tell which). Empty until then. Any thread.
  std::vector<int> ended_before_close() const EXCLUDES(state_mu_);
  // Those whose end is gone now; after this rank's close an end may also be a live peer's
  // answer to it. For shrink(): any thread, once the communicator ended.
  std::vector<int> ended_now() const;
  // The last operation completed, for progress lines and timeout reports.
  void note_done(uint64_t seq, const OpLabel& what) {
    done_seq_ = seq;
    done_what_ = what;
  }
  uint64_t done_seq() const { return done_seq_; }

  // The destructor's: this rank leaves the job's store, bounded (and without a word when the
  // store is what failed).
  void leave_store();
  // shrink() made a communicator of the survivors from this one: its failure is settled, and
  // does not shorten the store's lease (bootstrap/job_lease.h).
  void settled_by_shrink() { settled_by_shrink_.store(true); }

 private:
  void end(CommState state, Status s) EXCLUDES(state_mu_);
  std::string abort_reason() const EXCLUDES(state_mu_);
  TimeoutReport timeout_report(uint64_t seq, const std::string& what);
  std::string store_trouble() const;
  std::vector<std::pair<int, uint64_t>> retransmits() const;
  int own_culprit(const Status& s, std::string* why) const;
  void blame_store_server(int* culprit, std::string* why) const;
  std::string blame(const std::string& what, int culprit, const std::string& why) const;
  void close_after_failure(const std::vector<OpRun*>& runs);
  void note_ended_peers() EXCLUDES(state_mu_);
  void name_the_gone(int culprit) EXCLUDES(state_mu_);
  std::string progress_text(uint64_t seq, const std::string& what, const std::string& waiting) const;
  Status report_own(const Status& s, const std::string& what, uint64_t seq, int culprit, std::string why);
  Status report_adopted(const Status& s, const std::string& what, uint64_t seq, const Failure& adopted,
                        std::string why);

  const CommunicatorConfig& cfg_;
  CommLinks& links_;
  FailureBoard board_;
  std::atomic<CommState> state_{CommState::ok};
  std::atomic<bool> abort_requested_{false};
  std::atomic<bool> settled_by_shrink_{false};
  mutable Mutex state_mu_;
  Status failure_ GUARDED_BY(state_mu_);  // the reason state_ is not ok
  std::string abort_reason_ GUARDED_BY(state_mu_);
  std::vector<int> ended_peers_ GUARDED_BY(state_mu_);  // ended_before_close()
  CondVar state_cv_;
  // Only the thread that holds the engine touches these.
  int failed_peer_ = -1;
  bool links_closed_ = false;
  // "ranks 1 and 3 on host 10.0.0.2 unreachable" when this rank's failure found more peers gone
  // than the culprit: added to the first line of its message (blame).
  std::string gone_text_;
  uint64_t done_seq_ = 0;
  OpLabel done_what_;
};

}  // namespace braid
