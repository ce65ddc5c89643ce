#include "runtime/failure/comm_failure.h"

#include <algorithm>
#include <iterator>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "runtime/bootstrap/store_join.h"
#include "runtime/engine/op_run.h"

namespace braid {
namespace {

// How long the rank that timed out first waits for the others' progress lines, and how long
// the others wait for its report. Idle ranks answer within a second (kBoardInterval).
constexpr auto kReportCollect = std::chrono::seconds(3);
constexpr auto kReportWait = std::chrono::seconds(6);
// After closing the connections: how long the transport may take to hand back our operations.
constexpr auto kDrainBound = std::chrono::seconds(2);
constexpr auto kAbortBound = std::chrono::seconds(10);
// How long a rank that could not read a peer's header waits for that peer's precise report.
constexpr auto kPreciseReportWait = std::chrono::milliseconds(1500);

// "3", "1 and 3", "1, 3 and 5".
std::string list_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

}  // namespace

const char* to_string(CommState s) noexcept {
  switch (s) {
    case CommState::ok: return "ok";
    case CommState::aborted: return "aborted";
    case CommState::failed: return "failed";
  }
  return "?";
}

CommFailure::CommFailure(const CommunicatorConfig& cfg, CommLinks& links)
    : cfg_(cfg), links_(links), board_(cfg.board_store ? cfg.board_store : cfg.store, cfg.rank, cfg.size) {}

Status CommFailure::failure() const {
  MutexLock lock(state_mu_);
  return failure_;
}

Status CommFailure::fail_fast_status(const std::string& what) const {
  Status f;
  std::string reason;
  {
    MutexLock lock(state_mu_);
    f = failure_;
    reason = abort_reason_;
  }
  const std::string where = what + " on rank " + std::to_string(cfg_.rank) + " not run: ";
  if (f.is_ok()) return Status(ErrorCode::aborted, where + "the communicator was aborted on this rank (" + reason + ")");
  return Status(f.code(), where + "the communicator " + to_string(state()) + " earlier: " + f.message());
}

void CommFailure::end(CommState state, Status s) {
  {
    MutexLock lock(state_mu_);
    if (state_.load() != CommState::ok) return;
    failure_ = s;
    state_.store(state, std::memory_order_release);
  }
  state_cv_.notify_all();
  BRAID_LOG(warn) << "communicator " << to_string(state) << ": " << s.message();
}

std::vector<int> CommFailure::ended_before_close() const {
  MutexLock lock(state_mu_);
  return ended_peers_;
}

std::vector<int> CommFailure::ended_now() const { return links_.get() ? links_->ended_peers() : std::vector<int>{}; }

// Which connections the peers ended, asked before this rank ends them all itself.
void CommFailure::note_ended_peers() {
  const std::vector<int> now = ended_now();
  MutexLock lock(state_mu_);
  std::vector<int> all;
  std::set_union(ended_peers_.begin(), ended_peers_.end(), now.begin(), now.end(), std::back_inserter(all));
  ended_peers_ = std::move(all);
}

// A whole host lost shows as several connections ended at once; the first one seen (the
// culprit) leads the message, and the others are named beside it, by host. Peers that closed
// their connections on purpose (survivors that learned of the failure first) are not gone.
void CommFailure::name_the_gone(int culprit) {
  note_ended_peers();
  const std::vector<int> gone = board_.without_closing_mark(ended_before_close());
  if (gone.empty() || (gone.size() == 1 && gone[0] == culprit)) return;
  std::vector<std::pair<std::string, std::vector<int>>> by_host;
  for (int r : gone) {
    const std::string host = links_.get() ? links_->peer_host(r) : "";
    auto at = std::find_if(by_host.begin(), by_host.end(), [&](const auto& h) { return h.first == host; });
    if (at == by_host.end()) at = by_host.insert(by_host.end(), {host, {}});
    at->second.push_back(r);
  }
  std::string text;
  for (size_t i = 0; i < by_host.size(); ++i) {
    const auto& [host, ranks] = by_host[i];
    if (i > 0) text += i + 1 == by_host.size() ? " and " : ", ";
    text += (ranks.size() == 1 ? "rank " : "ranks ") + list_ranks(ranks);
    if (!host.empty()) text += host == "this host" ? " on this host" : " on host " + host;
  }
  gone_text_ = text + " unreachable";
}

// A rank that learned of a failure (or aborts) says so before it closes: its peers then tell
// it from a dead rank (failure_board.h). A healthy communicator's destruction leaves no mark
// (and no key behind): its rank is leaving, which its peers may count as gone.
void CommFailure::close_after_failure(const std::vector<OpRun*>& runs) {
  if (links_.get()) board_.mark_closing();
  close_connections(runs);
}

void CommFailure::close_connections(const std::vector<OpRun*>& runs) {
  if (!links_.get()) return;
  if (!links_closed_) note_ended_peers();  // once closed, an end may answer this rank's close
  links_closed_ = true;
  links_->close_all();
  if (runs.empty()) return;
  auto outstanding = [&] {
    size_t n = 0;
    for (OpRun* r : runs) n += r->outstanding();
    return n;
  };
  auto take = [&](const transport::Completion& c) {
    for (OpRun* r : runs) {
      bool ours = false;
      (void)r->on_completion(c, &ours);
      if (ours) break;
    }
  };
  links_->drain(outstanding, take, kDrainBound);
}

std::vector<std::pair<int, uint64_t>> CommFailure::retransmits() const {
  return links_.get() ? links_->retransmits() : std::vector<std::pair<int, uint64_t>>{};
}

std::string CommFailure::progress_text(uint64_t seq, const std::string& what, const std::string& waiting) const {
  std::string s = seq == 0 ? "idle (not inside a braid operation)" : "in " + what;
  if (!waiting.empty()) s += ", waiting for " + waiting;
  return s + "; last completed " + (done_seq_ == 0 ? std::string("none") : done_what_.str());
}

TimeoutReport CommFailure::timeout_report(uint64_t seq, const std::string& what) {
  auto all = board_.collect_progress(Deadline::after(kReportCollect));
  std::ostringstream o;
  o << "Timeout report for operation #" << seq << " (" << what << ", first timed out on rank " << cfg_.rank << "): ";
  if (board_.store_unreachable()) {
    // Every rank would read "no answer" here, which says nothing about them.
    o << "none: the other ranks' progress could not be read from the store";
    return {-1, o.str()};
  }
  std::string late, silent, lines, links;
  std::vector<int> silent_ranks;
  int culprit = -1, first_late = -1;
  for (int r = 0; r < cfg_.size; ++r) {
    const auto& p = all[static_cast<size_t>(r)];
    lines += "; rank " + std::to_string(r) + ": ";
    if (!p) {
      silent += (silent.empty() ? "" : ", ") + std::to_string(r);
      silent_ranks.push_back(r);
      if (culprit < 0) culprit = r;
      lines += "no answer (dead, stuck without its progress thread, or cut off from the store)";
      continue;
    }
    if (std::max(p->in_seq, p->done_seq) < seq) {
      late += (late.empty() ? "" : ", ") + std::to_string(r);
      if (first_late < 0) first_late = r;
    }
    for (const auto& [peer, count] : p->retransmits) {
      links += (links.empty() ? "" : ", ") + std::to_string(r) + "->" + std::to_string(peer) + " " + std::to_string(count);
    }
    lines += p->text;
  }
  // A link that loses packets stalls the ranks on either side, and the ranks behind them, with
  // no rank late or silent: the retransmission counts say which.
  const LossyLink lossy = find_lossy_link(all);
  o << "ranks that have not reached operation #" << seq << ": " << (late.empty() ? "none" : late);
  if (!silent.empty()) o << "; ranks that did not answer: " << silent;
  if (!links.empty()) {
    o << "; TCP retransmissions (sender->receiver count): " << links;
    if (lossy.rank >= 0) o << " - rank " << lossy.rank << " is on every link that lost packets: its link loses packets";
    if (lossy.rank < 0 && lossy.a >= 0) {
      o << " - most on the link between rank " << lossy.a << " and rank " << lossy.b
        << ": one of them has a link that loses packets";
    }
  }
  o << lines;
  if (!board_.store_problem().empty()) o << "; the store could not be read: " << board_.store_problem();
  // A rank whose progress line never came may only have been cut off from the store, by the
  // lossy link of the rank that serves it: silence then says nothing against the silent rank.
  if (lossy.rank >= 0 && lossy.rank == cfg_.store_rank) return {lossy.rank, o.str()};
  return {culprit >= 0 ? culprit : lossy.rank >= 0 ? lossy.rank : first_late, o.str(), silent_ranks};
}

// What happened to the store, for messages: which bound expired, or that it is gone.
std::string CommFailure::store_trouble() const {
  const std::string who = cfg_.store_rank >= 0 ? "the store that rank " + std::to_string(cfg_.store_rank) + " serves"
                                                : "the store";
  if (board_.store_silent()) {
    const auto ms = board_.store_timeout().count();
    std::string s = who + " at " + board_.store_address() + " did not answer within " + std::to_string(ms / 1000) + "." +
                    std::to_string(ms % 1000 / 100) + " s";
    if (cfg_.board_bounded) s += ", the bound on failure reports (BRAID_TIMEOUT_S, kept within 5..10 s)";
    return s;
  }
  return who + " at " + board_.store_address() + " dropped the connection (" +
         (cfg_.store_rank >= 0 ? "rank " + std::to_string(cfg_.store_rank) + " exited or crashed" : "its server is gone") + ")";
}

// The rank to blame for `s`, which this rank found itself; -1 when it cannot tell. Without a
// launcher rank 0 serves the store: when that store is silent or gone, rank 0 is stopped, dead
// or cut off, and what this rank saw itself (often a peer that closed its connections in
// reaction) is secondary. `why` gets the reason when it is not `s` itself.
int CommFailure::own_culprit(const Status& s, std::string* why) const {
  int culprit = -1;
  blame_store_server(&culprit, why);
  if (culprit >= 0) return culprit;
  if (s.code() == ErrorCode::peer_lost && failed_peer_ >= 0) return failed_peer_;
  if (s.code() == ErrorCode::aborted) return cfg_.rank;
  return -1;
}

// With no culprit known yet: the rank serving a store that stopped answering, if any.
void CommFailure::blame_store_server(int* culprit, std::string* why) const {
  if (*culprit >= 0 || !board_.store_unreachable() || cfg_.store_rank < 0 || cfg_.store_rank == cfg_.rank) return;
  *culprit = cfg_.store_rank;
  *why = store_trouble();
}

// "<what> on rank R failed because of rank C (why): ", or "" when C is unknown or this rank.
std::string CommFailure::blame(const std::string& what, int culprit, const std::string& why) const {
  if (culprit < 0 || culprit == cfg_.rank) return "";
  std::string also = why;
  if (!gone_text_.empty()) also += (also.empty() ? "" : "; ") + gone_text_;
  return what + " on rank " + std::to_string(cfg_.rank) + " failed because of rank " + std::to_string(culprit) +
         (also.empty() ? "" : " (" + also + ")") + ": ";
}

std::string CommFailure::abort_reason() const {
  MutexLock lock(state_mu_);
  return abort_reason_;
}

Status CommFailure::on_failure(Status s, const std::string& what, uint64_t seq, const std::vector<OpRun*>& runs,
                               std::optional<Failure> adopted) {
  const std::string me = "rank " + std::to_string(cfg_.rank);
  std::string waiting;
  bool header_unread = false;
  for (OpRun* r : runs) {
    if (!r->done()) waiting += (waiting.empty() ? "" : ", ") + r->waiting_for();
    header_unread = header_unread || r->header_unread();
  }
  if (abort_requested_.load()) {
    const std::string reason = abort_reason();
    (void)board_.publish({ErrorCode::aborted, cfg_.rank, me + " aborted the communicator (" + reason + ")", cfg_.rank});
    close_after_failure(runs);
    Status out(ErrorCode::aborted, what + " on " + me + ": aborted on this rank (" + reason + ")");
    end(CommState::aborted, out);
    return out;
  }
  if (!adopted && header_unread) {
    const Deadline bound = Deadline::after(kPreciseReportWait);
    while (!(adopted = board_.read()) && !bound.expired() && !board_.store_unreachable()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::string why;
  if (!adopted) {
    // Often the consequence of another rank's failure (it closed its connections after
    // writing the reason): look before claiming it.
    adopted = board_.read();
    if (!adopted || adopted->rank == cfg_.rank) {
      const int culprit = own_culprit(s, &why);
      adopted = board_.publish({s.code(), cfg_.rank, s.message(), culprit});
    }
  }
  board_.write_progress({seq, done_seq_, retransmits(), progress_text(seq, what, waiting)});
  if (s.code() == ErrorCode::peer_lost || adopted->code == ErrorCode::peer_lost) name_the_gone(adopted->culprit);
  Status out = adopted->rank == cfg_.rank ? report_own(s, what, seq, adopted->culprit, std::move(why))
                                          : report_adopted(s, what, seq, *adopted, std::move(why));
  close_after_failure(runs);
  end(CommState::failed, out);
  return out;
}

// This rank's own failure, published under its name: a timeout adds the report of every rank's
// progress, which may name the culprit.
Status CommFailure::report_own(const Status& s, const std::string& what, uint64_t seq, int culprit, std::string why) {
  std::string msg = s.message();
  if (s.code() == ErrorCode::timeout) {
    const TimeoutReport report = timeout_report(seq, what);
    board_.write_report(report);
    if (culprit < 0) culprit = report.culprit;
    msg += ". " + report.text;
    blame_store_server(&culprit, &why);
  } else if (board_.store_unreachable()) {
    msg += " (the other ranks could not be told: " + (why.empty() ? store_trouble() : "the store is unreachable") + ")";
  }
  return Status(s.code(), blame(what, culprit, why) + msg);
}

// Another rank's failure, read from the board: its timeout report, or this rank's own when
// none came.
Status CommFailure::report_adopted(const Status& s, const std::string& what, uint64_t seq, const Failure& adopted,
                                   std::string why) {
  int culprit = adopted.culprit;
  std::string msg = "rank " + std::to_string(adopted.rank) + " reported: " + adopted.message;
  if (adopted.code == ErrorCode::timeout) {
    if (auto report = board_.wait_report(Deadline::after(kReportWait))) {
      msg += ". " + report->text;
      if (culprit < 0) culprit = report->culprit;
    } else if (!board_.store_unreachable()) {
      // The rank that timed out first may be the one cut off (its link lost the report):
      // this rank reads the others' progress itself.
      const TimeoutReport own = timeout_report(seq, what);
      msg += ". No report from rank " + std::to_string(adopted.rank) + "; this rank's: " + own.text;
      if (culprit < 0) culprit = own.culprit;
    }
  }
  // The report may not have come because the store stopped answering in the meantime.
  blame_store_server(&culprit, &why);
  if (s.message() != adopted.message) msg += " (this rank saw: " + s.message() + ")";
  const std::string lead = blame(what, culprit, why);
  return Status(adopted.code, (lead.empty() ? what + " on rank " + std::to_string(cfg_.rank) + " failed: " : lead) + msg);
}

void CommFailure::idle_check() {
  if (state() != CommState::ok || cfg_.size == 1) return;
  auto f = board_.read();
  if (!f) return;
  board_.write_progress({0, done_seq_, retransmits(), progress_text(0, "", "")});
  std::string detail = "rank " + std::to_string(f->rank) + " reported: " + f->message;
  int culprit = f->culprit;
  if (f->code == ErrorCode::timeout) {
    if (auto report = board_.wait_report(Deadline::after(kReportWait))) {
      detail += ". " + report->text;
      if (culprit < 0) culprit = report->culprit;
    }
  }
  std::string why;
  blame_store_server(&culprit, &why);
  if (f->code == ErrorCode::peer_lost) name_the_gone(culprit);
  if (!gone_text_.empty()) why += (why.empty() ? "" : "; ") + gone_text_;
  const std::string because = culprit >= 0 && culprit != cfg_.rank ? " because of rank " + std::to_string(culprit) +
                                                                         (why.empty() ? "" : " (" + why + ")")
                                                                   : "";
  close_after_failure({});
  end(CommState::failed, Status(f->code, "rank " + std::to_string(cfg_.rank) +
                                             ": the communicator failed while this rank was idle" + because + ": " +
                                             detail));
}

void CommFailure::handle_abort() {
  const std::string reason = abort_reason();
  const std::string me = "rank " + std::to_string(cfg_.rank);
  (void)board_.publish({ErrorCode::aborted, cfg_.rank, me + " aborted the communicator (" + reason + ")", cfg_.rank});
  close_after_failure({});
  end(CommState::aborted, Status(ErrorCode::aborted, me + ": the communicator was aborted on this rank (" + reason + ")"));
}

void CommFailure::request_abort(const std::string& reason) {
  MutexLock lock(state_mu_);
  if (!abort_requested_.load()) abort_reason_ = reason;
  abort_requested_.store(true);
}

void CommFailure::wait_until_ended() {
  // The operation in progress ends within one poll slice; the store write may take a moment.
  const auto until = Clock::now() + kAbortBound;
  MutexLock lock(state_mu_);
  while (state_.load() == CommState::ok) {
    if (!state_cv_.wait_until(lock, until) && state_.load() == CommState::ok) return;
  }
}

// A rank that finishes early may leave. What this communicator kept in the store goes as its
// ranks leave (leave_store). The rank serving the store must stay until every rank of the job
// is done with it - with every communicator, children of other colors included - or the late
// ones would lose their store: its lease sees to that when its last communicator goes
// (bootstrap/job_lease.h). A failure that no shrink() settled makes that wait short.
void CommFailure::leave_store() {
  if (!cfg_.store) return;
  const bool failed = state() != CommState::ok;
  // After a failure the store may be what failed (its server stopped or dead): the failure
  // board found out already, at the cost of one bounded call, and then nothing is asked of it.
  if (failed && cfg_.lease && !settled_by_shrink_.load()) cfg_.lease->failure_seen();
  if (failed && board_.store_unreachable()) {
    if (cfg_.lease) cfg_.lease->store_gone();
    BRAID_LOG(warn) << "rank " << cfg_.rank << " leaving without telling the store: " << store_trouble();
    return;
  }
  // The board's connection has the failure-report bound; the program's may wait minutes.
  Store& store = failed && cfg_.board_bounded ? *cfg_.board_store : *cfg_.store;
  try {
    // The rank serving the store does not wait here: its lease, which ends with its last
    // communicator, waits for every rank of the job (bootstrap/job_lease.h).
    braid::leave_store(store, cfg_.rank, cfg_.size, false);
  } catch (const Error& e) {
    // A store the program handed in (torch's lives in its rank 0) may go first at a clean exit.
    if (!failed && cfg_.foreign_store) {
      BRAID_LOG(info) << "rank " << cfg_.rank << " leaving: the program's store is gone already (" << e.what() << ")";
    } else {
      BRAID_LOG(warn) << "rank " << cfg_.rank << " leaving: the store is gone (" << e.what() << ")";
    }
  }
}

}  // namespace braid
