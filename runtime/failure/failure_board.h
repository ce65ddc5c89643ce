// runtime/failure/failure_board.h - how the ranks of a communicator tell each other that it failed.
//
// A rank that finds a failure itself (a mismatch, a timeout, a lost peer, abort()) writes it
// here before it closes its connections, so a rank that then sees only "peer closed the
// connection" can tell every caller the real reason. Nothing is written while all is well:
// the board is read when an operation failed, when one has waited a second or more, and
// by an idle progress thread once a second.
//
// Keys, in the communicator's own store namespace:
//   abort         "<code>\n<rank>\n<culprit>\n<message>" - the first failure; the first writer
//                 wins. culprit: the rank that failed as the writer saw it, -1 when unknown
//   progress/<r>  "<in_seq> <done_seq> <retransmits>\n<text>" - rank r's progress, written once it
//                 learned of the failure: the operation it is in (0: idle), the last one it
//                 completed, and its connections that retransmitted ("1:40,3:2": peer:count;
//                 "-": none)
//   report        "<culprit> <silent>\n<text>": the timeout report, written by the rank that timed
//                 out first; silent: the ranks that did not answer ("1,3"; "-": none)
//   closing/<r>   "": rank r closes its connections on purpose (it learned of a failure, or was
//                 aborted), written before it closes them. A peer that finds its connection to r
//                 ended and no such key behind it knows r died (or left) without a word:
//                 written-then-closed on r's side comes before ended-then-read on the reader's.
//
// Every call is bounded by the store's own timeout; the communicator gives the board a
// connection of its own with a short one (communicator.cc). The first call that gets no answer
// or finds the connection lost marks the store unreachable, and the board makes no more calls:
// one stopped store costs one bound, not one per call.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/store.h"
#include "common/deadline.h"
#include "common/status.h"

namespace braid {

struct Failure {
  ErrorCode code = ErrorCode::internal;
  int rank = -1;        // the rank that found it
  std::string message;  // complete in itself
  int culprit = -1;     // the rank that failed (a dead or silent peer, an aborting rank); -1: unknown
};

struct TimeoutReport {
  int culprit = -1;  // the first rank that did not answer, else the first late one; -1: none
  std::string text;
  std::vector<int> silent{};  // every rank that did not answer (dead, stopped or cut off)
};

struct Progress {
  uint64_t in_seq = 0;    // the operation it is running, 0 when idle
  uint64_t done_seq = 0;  // the last operation it completed
  std::vector<std::pair<int, uint64_t>> retransmits;  // (peer, count) for connections that retransmitted
  std::string text;
};

// Which link loses packets, from every rank's retransmission counts (nullopt: no answer).
// TCP retransmits on the links that lose packets, and now and then on any busy link (tail-loss
// probes, spurious timeouts on a loaded machine): the links that count are those with at least
// a quarter of the busiest one's retransmissions (and 3). One rank on all of them, with two or
// more: `rank`; else, with two or more, the rank whose links carry at least 1.5 times the
// retransmissions of any other rank's. A single such link: its ends `a` < `b` (either may be
// the lossy one). Else -1s.
struct LossyLink {
  int rank = -1;
  int a = -1, b = -1;
};
LossyLink find_lossy_link(const std::vector<std::optional<Progress>>& all);

class FailureBoard {
 public:
  FailureBoard(std::shared_ptr<Store> store, int rank, int size);

  // Writes `f` unless a failure is there already; returns the one on the board afterwards
  // (`f` itself when the store cannot be reached).
  Failure publish(const Failure& f);
  // The failure on the board, without waiting; nullopt when none (or the store is gone).
  std::optional<Failure> read();
  void write_progress(const Progress& p);
  // Every rank's progress; waits up to `bound` for missing ones (nullopt: no answer).
  std::vector<std::optional<Progress>> collect_progress(Deadline bound);
  void write_report(const TimeoutReport& report);
  std::optional<TimeoutReport> wait_report(Deadline bound);
  // This rank is about to close its connections on purpose (closing/<r> above).
  void mark_closing();
  // Those of `ranks` that wrote no closing mark: of ranks whose connection ended, the ones that
  // died or left. All of `ranks` when the store cannot be read (nothing to tell them apart).
  std::vector<int> without_closing_mark(const std::vector<int>& ranks);
  // The first store error seen ("" when none), for messages.
  const std::string& store_problem() const { return store_problem_; }
  // True once a call got no answer in time or found the connection lost; no call is made after.
  bool store_unreachable() const { return unreachable_; }
  // True when that was a call that got no answer in time (the store is silent, not gone).
  bool store_silent() const { return silent_; }
  std::string store_address() const;
  std::chrono::milliseconds store_timeout() const;

 private:
  template <typename F>
  bool guarded(F&& f);
  int rank_or_none(int r) const;

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::string store_problem_;
  bool unreachable_ = false;
  bool silent_ = false;
};

}  // namespace braid
