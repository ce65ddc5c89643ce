// CommunicatorImpl::shrink: end this communicator, agree through its store on the ranks that go
// on (bootstrap/shrink.h), and make their communicator.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/bootstrap/shrink.h"
#include "runtime/communicator_impl.h"
#include "runtime/failure/failure_board.h"

namespace braid {
namespace {

// How long a rank whose connection ended after this rank closed its own may take to leave its
// closing mark: a survivor marks as soon as it learns of the failure, from a failed operation
// at once or from its idle progress thread's look at the failure board (once a second).
constexpr auto kMarkGrace = std::chrono::milliseconds(2000);

// The ranks the failure on `board` names as dead or silent: a lost peer, or the one a timeout's
// report blames and every rank that did not answer for it (a host cut off takes several). None
// when the failure was of another kind (an abort, a mismatch: the rank it names is alive and
// will call shrink too).
std::vector<int> named_failed_ranks(FailureBoard& board) {
  const std::optional<Failure> f = board.read();
  if (!f) return {};
  if (f->code == ErrorCode::peer_lost) return {f->culprit};
  if (f->code != ErrorCode::timeout) return {};
  std::vector<int> out = {f->culprit};
  const std::optional<TimeoutReport> report = board.wait_report(Deadline::after(std::chrono::seconds(0)));
  if (report) {
    out.push_back(report->culprit);
    out.insert(out.end(), report->silent.begin(), report->silent.end());
  }
  return out;
}

Status bad_exclude(int r, int size, bool twice) {
  return invalid_argument("shrink: excluded rank " + std::to_string(r) +
                          (twice ? " is listed twice" : " is not in [0, " + std::to_string(size) + ")"));
}

}  // namespace

// Why the survivors cannot agree: the store is gone, most likely with the rank that served it.
Status CommunicatorImpl::shrink_store_gone(const std::string& what) const {
  const std::string who = cfg_.store_rank >= 0 && cfg_.store_rank != cfg_.rank
                              ? "rank " + std::to_string(cfg_.store_rank) + " served it in its own process and is gone with it"
                              : "its server is gone";
  return Status(ErrorCode::peer_lost,
                "shrink on rank " + std::to_string(cfg_.rank) + ": the store at " + cfg_.store->address() +
                    " cannot be reached (" + what + "): " + who +
                    ". The survivors agree on a new communicator through the store, so none can be made. For "
                    "shrink to outlive any rank, serve the store outside the ranks: a launcher's (braidrun serves "
                    "one) or a process of its own, handed to Communicator::from_store");
}

Result<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::shrink(const std::vector<int>& exclude) {
  ShrinkRound round{.rank = cfg_.rank, .size = cfg_.size};
  round.excluded.assign(static_cast<size_t>(cfg_.size), false);
  round.suspected.assign(static_cast<size_t>(cfg_.size), false);
  for (int r : exclude) {
    if (r < 0 || r >= cfg_.size) return bad_exclude(r, cfg_.size, false);
    if (round.excluded[static_cast<size_t>(r)]) return bad_exclude(r, cfg_.size, true);
    round.excluded[static_cast<size_t>(r)] = true;
  }
  if (cfg_.store_rank >= 0 && round.excluded[static_cast<size_t>(cfg_.store_rank)]) {
    return invalid_argument("shrink: rank " + std::to_string(cfg_.store_rank) +
                            " cannot be excluded: it serves the store (at " + cfg_.store->address() +
                            ") that the new communicator meets through. Run the job under braidrun, whose store "
                            "outlives every rank");
  }
  round.attempt = ++shrink_count_;
  round.window = std::chrono::milliseconds(static_cast<int64_t>(cfg_.env.shrink_timeout_s * 1000));
  abort("shrink() called on rank " + std::to_string(cfg_.rank));
  if (round.excluded[static_cast<size_t>(cfg_.rank)]) return std::unique_ptr<CommunicatorImpl>();

  // The board's connection bounds each call by the failure-report bound; a store the program
  // handed in has only its own.
  const std::shared_ptr<Store> ns = cfg_.board_bounded ? cfg_.board_store : cfg_.store;
  FailureBoard board(ns, cfg_.rank, cfg_.size);
  const std::vector<int> suspects = named_failed_ranks(board);
  if (board.store_unreachable()) return shrink_store_gone(board.store_problem());
  for (int r : suspects) {
    if (r >= 0 && r < cfg_.size && r != cfg_.rank) round.suspected[static_cast<size_t>(r)] = true;
  }
  // A rank whose connection ended before this rank closed its own, and that left no closing
  // mark on the board, is dead: a survivor closing on purpose marks first (failure_board.h).
  // A whole host lost takes several at once and the failure names one.
  for (int r : board.without_closing_mark(failure_.ended_before_close())) {
    if (r != cfg_.rank) round.suspected[static_cast<size_t>(r)] = true;
  }
  // The others' sockets may close some milliseconds later, after this rank's close; an end then
  // may also be a live survivor's transport answering that close, its mark still to come. Such
  // a rank is counted dead once kMarkGrace passed without its mark. A mark, once seen, stays.
  std::vector<bool> marked(static_cast<size_t>(cfg_.size), false);
  std::vector<std::optional<Deadline>> unmarked_until(static_cast<size_t>(cfg_.size));
  round.gone = [&] {
    std::vector<int> ended;
    for (int r : failure_.ended_now()) {
      if (!marked[static_cast<size_t>(r)] && !round.suspected[static_cast<size_t>(r)]) ended.push_back(r);
    }
    const std::vector<int> unmarked = board.without_closing_mark(ended);
    std::vector<int> out;
    for (int r : ended) {
      const auto i = static_cast<size_t>(r);
      marked[i] = std::find(unmarked.begin(), unmarked.end(), r) == unmarked.end();
      if (marked[i]) continue;
      if (!unmarked_until[i]) unmarked_until[i] = Deadline::after(kMarkGrace);
      if (unmarked_until[i]->expired()) out.push_back(r);
    }
    return out;
  };
  Result<ShrinkMembers> members = Status(ErrorCode::internal, "shrink: no agreement");
  try {
    members = agree_on_members(*ns, round);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::timeout || e.code() == ErrorCode::peer_lost) return shrink_store_gone(e.what());
    throw;
  }
  if (!members.is_ok()) return members.status();
  if (cfg_.lease) {  // the ranks left out are not waited for when the store's rank leaves
    std::vector<bool> in(static_cast<size_t>(cfg_.size), false);
    for (int m : members.value().members) in[static_cast<size_t>(m)] = true;
    for (int r = 0; r < cfg_.size; ++r) {
      if (!in[static_cast<size_t>(r)]) cfg_.lease->let_go(job_rank_of(cfg_, r));
    }
    cfg_.lease->settled();
    failure_.settled_by_shrink();
  }
  return make_communicator_impl(shrink_config(cfg_, round.attempt, members.value()));
}

}  // namespace braid
