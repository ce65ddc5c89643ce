#include "runtime/engine/group_runner.h"

#include <array>
#include <cstring>
#include <utility>

#include "common/log.h"
#include "runtime/engine/lean_group.h"
#include "runtime/engine/run_set.h"

namespace braid {
namespace {

using collectives::Kind;

bool is_p2p(Kind k) { return k == Kind::send || k == Kind::recv; }

}  // namespace

void GroupRunner::finish(PendingOp& g, const Status& s) {
  for (auto& m : g.group) {
    if (!m.work->done()) held_.complete_last(m.work, s);
  }
  held_.complete_last(g.work, s);
}

void GroupRunner::run_member(PendingOp& m) {
  const bool hold = held_.set_holding(false);
  stream_.run(m, /*may_stream=*/false);
  held_.set_holding(hold);
}

void GroupRunner::run(PendingOp& g) {
  const auto& members = g.group;
  const OpLabel what = OpLabel::group(members.front().seq, members.back().seq, members.size());
  if (failure_.state() != CommState::ok) {
    finish(g, failure_.fail_fast_status(what.str()));
    return;
  }
  bool all_p2p = true;
  for (const auto& m : members) all_p2p = all_p2p && is_p2p(m.args.kind);
  if (all_p2p) {  // a send/recv group (the usual one) is never coalescible
    run_p2p(g, what);
    return;
  }
  bool coalescible = members.size() > 1;
  for (const auto& m : members) {
    const auto& a = m.args;
    coalescible = coalescible && a.kind == Kind::all_reduce && a.counts.empty() && a.dtype == members[0].args.dtype &&
                  a.op == members[0].args.op;
  }
  if (coalescible) {
    run_coalesced(g, what);
  } else {
    run_in_turn(g);
  }
}

void GroupRunner::run_coalesced(PendingOp& g, const OpLabel& what) {
  auto& members = g.group;
  const size_t esize = dtype_size(members[0].args.dtype);
  size_t total = 0;
  for (const auto& m : members) total += m.args.count;
  std::unique_ptr<std::byte[]> staging(new std::byte[total * esize]);
  size_t at = 0;
  for (const auto& m : members) {
    std::memcpy(staging.get() + at, m.args.send, m.args.count * esize);
    at += m.args.count * esize;
  }
  PendingOp one;
  one.args = members[0].args;
  one.args.send = staging.get();
  one.args.recv = staging.get();
  one.args.count = total;
  one.work = std::make_shared<detail::WorkState>();
  one.seq = members.back().seq;  // every rank coalesces alike, so these agree
  one.match_seq = members.back().match_seq;
  BRAID_LOG(trace) << what.str() << ": " << members.size() << " all_reduce calls coalesced into one of " << total
                   << " elements";
  run_member(one);
  Status s = one.work->status();
  if (s.is_ok()) {
    at = 0;
    for (auto& m : members) {
      std::memcpy(m.args.recv, staging.get() + at, m.args.count * esize);
      at += m.args.count * esize;
    }
  }
  finish(g, s);
}

void GroupRunner::run_in_turn(PendingOp& g) {
  Status first;
  for (auto& m : g.group) {
    run_member(m);
    if (first.is_ok()) first = m.work->status();
  }
  finish(g, first);
}

Status GroupRunner::build_p2p(std::vector<PendingOp>& members, const OpLabel& what, collectives::RunOptions& options) {
  // A group larger than half the cache is built anew each time: keeping its runs would push out
  // every kept collective (an all_to_all written as sends and receives to many peers).
  const bool keep = members.size() <= RunCache::kSize / 2;
  for (auto& m : members) {
    options.op_id = m.seq & 0x7fffffffu;
    const std::optional<RunShape> shape = keep ? RunCache::shape_of(m.args, m.device != nullptr, options.algo) : std::nullopt;
    // A run of an earlier group of the same shape runs again where the cache keeps it (a
    // send/recv loop builds each once); else one is prepared (RunFactory::make).
    OpRun* run = shape ? runs_.cache().lend(*shape) : nullptr;
    std::unique_ptr<OpRun> owned;
    if (run != nullptr) {
      Status reused = run->reuse(m.args, cfg_.comm_id, m.seq, m.match_seq, options.op_id);
      if (!reused.is_ok()) {
        runs_.cache().drop(run);
        return reused.with_context(what.str() + ": ");
      }
    } else {
      auto made = runs_.make(m, options, std::nullopt);
      if (!made.is_ok()) return made.status().with_context(what.str() + ": ");
      owned = std::move(made.value().run);
      run = owned.get();
    }
    if (run == nullptr) continue;
    BRAID_LOG(trace) << what.str() << ": " << collectives::to_string(m.args.kind) << " #" << m.seq << " count "
                     << m.args.count << " " << to_string(m.args.dtype) << " peer " << m.args.peer
                     << (owned ? ", built" : ", run again");
    int previous = -1;
    for (size_t j = 0; j < built_.size(); ++j) {
      const PendingOp& o = *built_[j].member;
      if (o.args.peer == m.args.peer && o.args.kind == m.args.kind) previous = static_cast<int>(j);
    }
    runs_.note_algo(run->algo());
    run_ptrs_.push_back(run);
    after_.push_back(previous);
    built_.push_back(GroupRun{run, std::move(owned), shape, &m});
  }
  return Status::ok();
}

void GroupRunner::return_runs(bool ok) {
  for (GroupRun& b : built_) {
    const bool again = ok && b.shape && b.run->done() && b.run->outstanding() == 0;
    if (b.owned == nullptr) {  // lent
      if (again) {
        runs_.cache().ran(b.run);
      } else {
        runs_.cache().drop(b.run);
      }
    } else if (again) {
      runs_.cache().keep(*b.shape, std::move(b.owned));
    }
  }
}

bool GroupRunner::run_lean(PendingOp& g, const OpLabel& what) {
  auto& members = g.group;
  const size_t n = members.size();
  if (n > LeanGroup::kMaxRuns) return false;
  const collectives::Algo algo = runs_.group_algo();  // of the group's options, only what a kept run needs
  std::array<OpRun*, LeanGroup::kMaxRuns> runs{};
  size_t lent = 0;
  for (; lent < n; ++lent) {
    const PendingOp& m = members[lent];
    if (m.device != nullptr) break;  // a GPU buffer's staged run is never kept
    const std::optional<RunShape> shape = RunCache::shape_of(m.args, /*staged=*/false, algo);
    runs[lent] = shape ? runs_.cache().lend(*shape) : nullptr;
    if (runs[lent] == nullptr) break;
  }
  if (lent < n) {  // not all kept: given back unrun, and build_p2p lends them again
    for (size_t i = 0; i < lent; ++i) runs_.cache().ran(runs[i]);
    return false;
  }
  lean_groups_.store(lean_groups_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // one writer
  std::array<int, LeanGroup::kMaxRuns> after{};
  const bool trace = log_enabled(LogLevel::trace);
  for (size_t i = 0; i < n; ++i) {
    PendingOp& m = members[i];
    // As build_p2p: a run that cannot take the new buffers is dropped with the others lent, and
    // nothing was sent.
    Status reused = runs[i]->reuse(m.args, cfg_.comm_id, m.seq, m.match_seq, m.seq & 0x7fffffffu);
    if (!reused.is_ok()) {
      for (size_t j = 0; j < n; ++j) runs_.cache().drop(runs[j]);
      finish(g, reused.with_context(what.str() + ": "));
      return true;
    }
    if (trace) {
      BRAID_LOG(trace) << what.str() << ": " << collectives::to_string(m.args.kind) << " #" << m.seq << " count "
                       << m.args.count << " " << to_string(m.args.dtype) << " peer " << m.args.peer << ", run again";
    }
    after[i] = -1;
    for (size_t j = 0; j < i; ++j) {
      if (members[j].args.peer == m.args.peer && members[j].args.kind == m.args.kind) after[i] = static_cast<int>(j);
    }
    runs_.note_algo(runs[i]->algo());
  }
  const Deadline deadline = runs_.deadline();
  std::optional<Failure> adopted;
  LeanGroup work(runs.data(), after.data(), n, what, deadline,
                 RunContext{.rank = cfg_.rank, .timeout_s = cfg_.env.timeout_s, .failure = &failure_, .adopted = &adopted});
  Status s = links_->drive_known(work, deadline);
  if (!s.is_ok()) {
    s = failure_.on_failure(std::move(s), what.str(), members.back().seq, std::vector<OpRun*>(runs.data(), runs.data() + n),
                            std::move(adopted));
    runs_.cache().clear();  // the failure may have closed connections the kept runs name (these too)
    finish(g, s);
    return true;
  }
  failure_.note_done(members.back().seq, what);
  for (size_t i = 0; i < n; ++i) {
    if (runs[i]->done() && runs[i]->outstanding() == 0) {
      runs_.cache().ran(runs[i]);
    } else {
      runs_.cache().drop(runs[i]);
    }
  }
  finish(g, s);
  return true;
}

void GroupRunner::run_p2p(PendingOp& g, const OpLabel& what) {
  if (run_lean(g, what)) return;
  auto& members = g.group;
  struct ClearAtExit {  // ends the runs not kept, on every way out
    GroupRunner& r;
    ~ClearAtExit() {
      r.built_.clear();
      r.run_ptrs_.clear();
      r.after_.clear();
    }
  } clear_at_exit{*this};
  collectives::RunOptions options = runs_.group_options();
  Status built = build_p2p(members, what, options);
  if (!built.is_ok()) {  // nothing was posted yet: the communicator stays usable
    return_runs(false);  // the runs lent so far were not run: dropped, as runs taken were
    finish(g, built);
    return;
  }
  Status s;
  if (!run_ptrs_.empty()) {
    std::optional<Failure> adopted;
    RunSet work(run_ptrs_, after_, started_, what, options.deadline, {},
                RunSet::Context{.rank = cfg_.rank, .timeout_s = cfg_.env.timeout_s, .failure = &failure_, .adopted = &adopted});
    s = links_->drive(work, options.deadline);
    if (!s.is_ok()) {
      s = failure_.on_failure(std::move(s), what.str(), members.back().seq, run_ptrs_, std::move(adopted));
      runs_.cache().clear();  // the failure may have closed connections the kept runs name (lent ones too)
      finish(g, s);
      return;
    }
  }
  failure_.note_done(members.back().seq, what);
  return_runs(true);
  finish(g, s);
}

}  // namespace braid
