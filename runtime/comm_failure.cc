// CommunicatorImpl's failure handling: what a rank does when an operation fails, when it
// learns that another rank failed, and when abort() is called (see communicator_impl.h).
#include <sstream>
#include <thread>

#include "common/log.h"
#include "runtime/communicator_impl.h"
#include "runtime/op_run.h"

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

}  // namespace

const char* to_string(CommState s) noexcept {
  switch (s) {
    case CommState::ok: return "ok";
    case CommState::aborted: return "aborted";
    case CommState::failed: return "failed";
  }
  return "?";
}

Status CommunicatorImpl::failure() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  return failure_;
}

Status CommunicatorImpl::fail_fast_status(const std::string& what) const {
  Status f;
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    f = failure_;
    reason = abort_reason_;
  }
  const std::string where = what + " on rank " + std::to_string(cfg_.rank) + " not run: ";
  if (f.is_ok()) return Status(ErrorCode::aborted, where + "the communicator was aborted on this rank (" + reason + ")");
  return Status(f.code(), where + "the communicator " + to_string(state()) + " earlier: " + f.message());
}

void CommunicatorImpl::end(CommState state, Status s) {
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (state_.load() != CommState::ok) return;
    failure_ = s;
    state_.store(state, std::memory_order_release);
  }
  state_cv_.notify_all();
  BRAID_LOG(warn) << "communicator " << to_string(state) << ": " << s.message();
}

// Closing every connection (not only the busy ones) is what tells peers blocked on this rank,
// at once, that something happened; the board tells them what.
void CommunicatorImpl::close_connections(const std::vector<OpRun*>& runs) {
  for (auto& c : connections_) {
    if (c) c->close();
  }
  if (runs.empty() || !transport_) return;
  auto outstanding = [&] {
    size_t n = 0;
    for (OpRun* r : runs) n += r->outstanding();
    return n;
  };
  const Deadline bound = Deadline::after(kDrainBound);
  std::vector<transport::Completion> done;
  while (outstanding() > 0 && !bound.expired()) {
    done.clear();
    if (!transport_->poll(done, std::chrono::milliseconds(10)).is_ok()) break;
    for (const auto& c : done) {
      for (OpRun* r : runs) {
        bool ours = false;
        (void)r->on_completion(c, &ours);
        if (ours) break;
      }
    }
  }
}

std::string CommunicatorImpl::progress_text(uint64_t seq, const std::string& what, const std::string& waiting) const {
  std::string s = seq == 0 ? "idle (not inside a braid operation)" : "in " + what;
  if (!waiting.empty()) s += ", waiting for " + waiting;
  return s + "; last completed " + (done_seq_ == 0 ? std::string("none") : done_what_);
}

std::string CommunicatorImpl::timeout_report(uint64_t seq, const std::string& what) {
  auto all = board_.collect_progress(Deadline::after(kReportCollect));
  std::string late, silent, lines;
  for (int r = 0; r < cfg_.size; ++r) {
    const auto& p = all[static_cast<size_t>(r)];
    lines += "; rank " + std::to_string(r) + ": ";
    if (!p) {
      silent += (silent.empty() ? "" : ", ") + std::to_string(r);
      lines += "no answer (dead, stuck without its progress thread, or cut off from the store)";
      continue;
    }
    if (std::max(p->in_seq, p->done_seq) < seq) late += (late.empty() ? "" : ", ") + std::to_string(r);
    lines += p->text;
  }
  std::ostringstream o;
  o << "Timeout report for operation #" << seq << " (" << what << ", first timed out on rank " << cfg_.rank
    << "): ranks that have not reached operation #" << seq << ": " << (late.empty() ? "none" : late);
  if (!silent.empty()) o << "; ranks that did not answer: " << silent;
  o << lines;
  if (!board_.store_problem().empty()) o << "; the store could not be read: " << board_.store_problem();
  return o.str();
}

Status CommunicatorImpl::on_failure(Status s, const std::string& what, uint64_t seq, const std::vector<OpRun*>& runs,
                                    std::optional<Failure> adopted) {
  const std::string me = "rank " + std::to_string(cfg_.rank);
  std::string waiting;
  bool header_unread = false;
  for (OpRun* r : runs) {
    if (!r->done()) waiting += (waiting.empty() ? "" : ", ") + r->waiting_for();
    header_unread = header_unread || r->header_unread();
  }
  if (abort_requested_.load()) {
    std::string reason;
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      reason = abort_reason_;
    }
    (void)board_.publish({ErrorCode::aborted, cfg_.rank, me + " aborted the communicator (" + reason + ")"});
    close_connections(runs);
    Status out(ErrorCode::aborted, what + " on " + me + ": aborted on this rank (" + reason + ")");
    end(CommState::aborted, out);
    return out;
  }
  if (!adopted && header_unread) {
    const Deadline bound = Deadline::after(kPreciseReportWait);
    while (!(adopted = board_.read()) && !bound.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!adopted) {
    // Often the consequence of another rank's failure (it closed its connections after
    // writing the reason): look before claiming it.
    adopted = board_.read();
    if (!adopted || adopted->rank == cfg_.rank) adopted = board_.publish({s.code(), cfg_.rank, s.message()});
  }
  board_.write_progress({seq, done_seq_, progress_text(seq, what, waiting)});
  Status out;
  if (adopted->rank == cfg_.rank) {
    std::string msg = s.message();
    if (s.code() == ErrorCode::timeout) {
      const std::string report = timeout_report(seq, what);
      board_.write_report(report);
      msg += ". " + report;
    } else if (!board_.store_problem().empty()) {
      msg += " (the other ranks could not be told: the store is unreachable: " + board_.store_problem() + ")";
    }
    out = Status(s.code(), msg);
  } else {
    std::string msg = what + " on " + me + " failed: rank " + std::to_string(adopted->rank) + " reported: " +
                      adopted->message;
    if (adopted->code == ErrorCode::timeout) {
      if (auto report = board_.wait_report(Deadline::after(kReportWait))) msg += ". " + *report;
    }
    if (s.message() != adopted->message) msg += " (this rank saw: " + s.message() + ")";
    out = Status(adopted->code, msg);
  }
  close_connections(runs);
  end(CommState::failed, out);
  return out;
}

void CommunicatorImpl::idle_check() {
  if (state() != CommState::ok || cfg_.size == 1) return;
  auto f = board_.read();
  if (!f) return;
  board_.write_progress({0, done_seq_, progress_text(0, "", "")});
  std::string msg = "rank " + std::to_string(cfg_.rank) + ": the communicator failed while this rank was idle: rank " +
                    std::to_string(f->rank) + " reported: " + f->message;
  if (f->code == ErrorCode::timeout) {
    if (auto report = board_.wait_report(Deadline::after(kReportWait))) msg += ". " + *report;
  }
  close_connections({});
  end(CommState::failed, Status(f->code, msg));
}

void CommunicatorImpl::handle_abort() {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    reason = abort_reason_;
  }
  const std::string me = "rank " + std::to_string(cfg_.rank);
  (void)board_.publish({ErrorCode::aborted, cfg_.rank, me + " aborted the communicator (" + reason + ")"});
  close_connections({});
  end(CommState::aborted, Status(ErrorCode::aborted, me + ": the communicator was aborted on this rank (" + reason + ")"));
}

void CommunicatorImpl::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (!abort_requested_.load()) abort_reason_ = reason;
    abort_requested_.store(true);
  }
  std::deque<Pending> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued.swap(queue_);
    for (auto& p : group_ops_) queued.push_back(std::move(p));
    group_ops_.clear();
  }
  for (auto& p : queued) {
    for (auto& m : p.group) {
      m.work->in_open_group.store(false);
      m.work->complete(Status(ErrorCode::aborted, std::string(collectives::to_string(m.args.kind)) + " #" +
                                                      std::to_string(m.seq) + " on rank " + std::to_string(cfg_.rank) +
                                                      ": aborted before it ran (" + reason + ")"));
    }
    p.work->in_open_group.store(false);
    p.work->complete(Status(ErrorCode::aborted, std::string(p.group.empty() ? collectives::to_string(p.args.kind) : "group") + " #" +
                                                    std::to_string(p.seq) + " on rank " + std::to_string(cfg_.rank) +
                                                    ": aborted before it ran (" + reason + ")"));
  }
  cv_.notify_all();
  wake_transport();
  // The operation in progress ends within one poll slice; the store write may take a moment.
  std::unique_lock<std::mutex> lock(state_mu_);
  state_cv_.wait_for(lock, kAbortBound, [&] { return state_.load() != CommState::ok; });
}

}  // namespace braid
