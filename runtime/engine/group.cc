// CommunicatorImpl's group calls: operations enqueued between group_start() and group_end()
// run as one unit on the progress thread.
//   - only send/recv: all run at once (each rank may send to one peer while it receives from
//     another, which one at a time would deadlock); two with the same peer and direction keep
//     their order;
//   - only all_reduce, one dtype and op: coalesced into one all_reduce over a staging buffer
//     (one latency for many small tensors);
//   - anything else: one after the other, as if there were no group.
#include <cstring>
#include <utility>

#include "collectives/runner.h"
#include "common/log.h"
#include "runtime/communicator_impl.h"
#include "runtime/engine/op_run.h"

namespace braid {
namespace {

using collectives::Kind;

bool is_p2p(Kind k) { return k == Kind::send || k == Kind::recv; }

}  // namespace

void CommunicatorImpl::group_start() {
  std::lock_guard<std::mutex> lock(mu_);
  ++group_depth_;
}

Work CommunicatorImpl::group_end() {
  auto work = std::make_shared<detail::WorkState>();
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (group_depth_ == 0) throw Error(ErrorCode::invalid_argument, "group_end() without a matching group_start()");
    if (--group_depth_ > 0) return Work();  // nested: the outermost group_end runs everything
    std::vector<Pending> members;
    members.swap(group_ops_);
    for (auto& m : members) m.work->in_open_group.store(false);
    if (members.empty()) return Work();
    Pending g;
    g.work = work;
    if (cfg_.env.caller_progress) work->comm = this;
    g.seq = members.front().seq;
    g.group = std::move(members);
    const bool idle = !busy_ && queue_.empty();
    queue_.push_back(std::move(g));
    wake = queued_locked(idle, work);  // a group is handed off like any operation
  }
  if (wake) wake_progress();
  work->note_returned();
  return Work(work);
}

void CommunicatorImpl::run_group(Pending& g) {
  auto& members = g.group;
  const OpLabel what = OpLabel::group(members.front().seq, members.back().seq, members.size());
  auto finish = [&](const Status& s) {
    for (auto& m : members) {
      if (!m.work->done()) complete_last(m.work, s);
    }
    complete_last(g.work, s);
  };
  // The members run one by one below have their results read at once: not held.
  auto run_member = [&](Pending& m) {
    const bool hold = std::exchange(hold_last_, false);
    run_one(m, /*may_stream=*/false);
    hold_last_ = hold;
  };
  if (state() != CommState::ok) {
    finish(fail_fast_status(what.str()));
    return;
  }
  bool all_p2p = true, coalescible = members.size() > 1;
  for (const auto& m : members) {
    const auto& a = m.args;
    all_p2p = all_p2p && is_p2p(a.kind);
    coalescible = coalescible && a.kind == Kind::all_reduce && a.counts.empty() && a.dtype == members[0].args.dtype &&
                  a.op == members[0].args.op;
  }

  if (coalescible) {
    const size_t esize = dtype_size(members[0].args.dtype);
    size_t total = 0;
    for (const auto& m : members) total += m.args.count;
    std::unique_ptr<std::byte[]> staging(new std::byte[total * esize]);
    size_t at = 0;
    for (const auto& m : members) {
      std::memcpy(staging.get() + at, m.args.send, m.args.count * esize);
      at += m.args.count * esize;
    }
    Pending one;
    one.args = members[0].args;
    one.args.send = staging.get();
    one.args.recv = staging.get();
    one.args.count = total;
    one.work = std::make_shared<detail::WorkState>();
    one.seq = members.back().seq;            // every rank coalesces alike, so these agree
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
    finish(s);
    return;
  }

  if (!all_p2p) {
    Status first;
    for (auto& m : members) {
      run_member(m);
      if (first.is_ok()) first = m.work->status();
    }
    finish(first);
    return;
  }

  collectives::RunOptions options;
  options.algo = forced_algo_;
  options.chunk_bytes = cfg_.env.chunk_bytes;
  options.ring_depth = ring_depth_;
  options.order = links_->ring_order();
  options.deadline = Deadline::after_seconds(cfg_.env.timeout_s);
  // Runs of earlier groups of the same shape run again (a send/recv loop builds each once).
  std::vector<GroupRun>& built = group_runs_;
  std::vector<OpRun*>& runs = group_run_ptrs_;
  std::vector<int>& after = group_after_;
  struct ClearAtExit {  // ends the runs not kept, on every way out
    std::vector<GroupRun>& built;
    std::vector<OpRun*>& runs;
    std::vector<int>& after;
    ~ClearAtExit() {
      built.clear();
      runs.clear();
      after.clear();
    }
  } clear_at_exit{built, runs, after};
  // A group larger than half the cache is built anew each time: keeping its runs would push out
  // every kept collective (an all_to_all written as sends and receives to many peers).
  const bool keep = members.size() <= RunCache::kSize / 2;
  for (auto& m : members) {
    options.op_id = m.seq & 0x7fffffffu;
    const std::optional<RunShape> shape = keep ? RunCache::shape_of(m.args, m.device != nullptr, options.algo) : std::nullopt;
    auto made = make_run(m, options, shape);
    if (!made.is_ok()) {  // nothing was posted yet: the communicator stays usable
      finish(made.status().with_context(what.str() + ": "));
      return;
    }
    std::unique_ptr<OpRun> run = std::move(made.value().run);
    if (run == nullptr) continue;
    BRAID_LOG(trace) << what.str() << ": " << collectives::to_string(m.args.kind) << " #" << m.seq << " count "
                     << m.args.count << " " << to_string(m.args.dtype) << " peer " << m.args.peer
                     << (made.value().reused ? ", run again" : ", built");
    int previous = -1;
    for (size_t j = 0; j < built.size(); ++j) {
      const Pending& o = *built[j].member;
      if (o.args.peer == m.args.peer && o.args.kind == m.args.kind) previous = static_cast<int>(j);
    }
    last_algo_.store(static_cast<int>(run->algo()), std::memory_order_relaxed);
    runs.push_back(run.get());
    after.push_back(previous);
    built.push_back(GroupRun{std::move(run), shape, &m});
  }
  Status s;
  if (!runs.empty()) {
    std::optional<Failure> adopted;
    s = drive(runs, after, what, options.deadline, &adopted);
    if (!s.is_ok()) {
      run_cache_.clear();  // the failure may have closed connections the kept runs name
      s = on_failure(std::move(s), what.str(), members.back().seq, runs, std::move(adopted));
    }
  }
  if (s.is_ok()) {
    done_seq_ = members.back().seq;
    done_what_ = what;
    for (GroupRun& b : built) {
      if (b.shape && b.run->done() && b.run->outstanding() == 0) run_cache_.keep(*b.shape, std::move(b.run));
    }
  }
  finish(s);
}

}  // namespace braid
