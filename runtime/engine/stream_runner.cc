#include "runtime/engine/stream_runner.h"

#include <algorithm>
#include <string>

#include "common/log.h"
#include "runtime/engine/lone_run.h"
#include "runtime/engine/progress_thread.h"
#include "runtime/engine/run_set.h"

namespace braid {

Status StreamRunner::finish_device(PendingOp& op, const Deadline& deadline, const OpLabel& what) {
  if (!op.device) return Status::ok();
  return op.device->finish(deadline).with_context(what.str() + ": ");
}

void StreamRunner::admit(PendingOp& op, std::unique_ptr<PendingOp> taken) {
  const OpLabel what = OpLabel::one(op.args.kind, op.seq);
  if (failure_.state() != CommState::ok) {
    op.work->complete(failure_.fail_fast_status(what.str()));
    return;
  }
  const collectives::RunOptions options = runs_.stream_options(op);
  if (op.device) {  // the GPU must have finished what was queued before the call
    Status ready = op.device->wait_input(options.deadline, [this] { return failure_.abort_requested(); });
    if (!ready.is_ok()) {
      op.work->complete(ready.with_context(what.str() + " on rank " + std::to_string(cfg_.rank) + ": "));
      return;
    }
  }
  // A finished run of the same shape is run again; otherwise one is prepared (OpRun::reuse).
  const std::optional<RunShape> shape = RunCache::shape_of(op.args, op.device != nullptr, options.algo);
  auto made = runs_.make(op, options, shape);
  if (!made.is_ok()) {
    op.work->complete(made.status().with_context(what.str() + ": "));
    return;
  }
  std::unique_ptr<OpRun> run = std::move(made.value().run);
  runs_.note_algo(made.value().algo);
  BRAID_LOG(trace) << what.str() << " (" << made.value().name << ") count " << op.args.count << " "
                   << to_string(op.args.dtype) << " starts"
                   << (ProgressThread::on_this_thread() ? " on the progress thread" : " on the caller's thread")
                   << (made.value().reused ? ", run again" : "")
                   << (active_.empty() ? "" : " (overlapping " + active_.back().what.str() + ")");
  if (run == nullptr) {
    failure_.note_done(op.seq, what);
    op.work->complete(finish_device(op, options.deadline, what));
    return;
  }
  run_ptrs_.push_back(run.get());
  after_.push_back(-1);
  // When it started, for TRACE's "done in" only: a clock read is a fair share of a small operation.
  const Clock::time_point started = log_enabled(LogLevel::trace) ? Clock::now() : Clock::time_point{};
  active_.push_back(StreamOp{op, std::move(taken), what, std::move(run), options.deadline, started, shape});
}

void StreamRunner::complete_finished(bool last) {
  const size_t oldest = oldest_;
  for (size_t i = oldest_; i < active_.size(); ++i) {  // those before oldest_ are completed
    StreamOp& a = active_[i];
    if (a.completed || !a.run->done()) continue;
    a.completed = true;
    failure_.note_done(std::max(failure_.done_seq(), a.op.seq), a.what);
    BRAID_LOG(trace) << a.what.str() << " done in "
                     << std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - a.started).count()
                     << " us";
    Status s = finish_device(a.op, a.deadline, a.what);
    if (last) {
      held_.complete_last(a.op.work, std::move(s));
    } else {
      a.op.work->complete(std::move(s));
    }
  }
  while (oldest_ < active_.size() && active_[oldest_].completed) ++oldest_;
  if (oldest_ != oldest && oldest_ < active_.size()) {  // run() set them for the first
    what_ = active_[oldest_].what;
    deadline_ = active_[oldest_].deadline;
    seq_ = active_[oldest_].op.seq;
  }
}

void StreamRunner::between() {
  complete_finished(false);
  if (!may_stream_ || !ProgressThread::on_this_thread() || active_.size() >= kMaxStream ||
      !active_.back().run->all_posted()) {
    return;
  }
  if (std::unique_ptr<PendingOp> next = queue_.take_next_for_stream()) {
    PendingOp& op = *next;
    admit(op, std::move(next));
  }
}

bool StreamRunner::run_kept(PendingOp& op) {
  // A GPU buffer's staged run is never kept; a failed communicator refuses the operation with
  // the stream path's words.
  if (op.device || failure_.state() != CommState::ok) return false;
  const std::optional<RunShape> shape = RunCache::shape_of(op.args, /*staged=*/false, runs_.stream_algo(op.args.kind));
  // Run where it is kept: it stays there (RunCache::lend) unless this operation fails.
  OpRun* run = shape ? runs_.cache().lend(*shape) : nullptr;
  if (run == nullptr) return false;
  lean_runs_.store(lean_runs_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // one writer
  const OpLabel what = OpLabel::one(op.args.kind, op.seq);
  // As admit() through RunFactory::make: a run that cannot take the new buffers is dropped, and
  // nothing was sent.
  Status reused = run->reuse(op.args, cfg_.comm_id, op.seq, op.match_seq, op.seq & 0x7fffffffu);  // as stream_options()
  if (!reused.is_ok()) {
    runs_.cache().drop(run);
    op.work->complete(reused.with_context(what.str() + ": "));
    return true;
  }
  runs_.note_algo(run->algo());
  const bool trace = log_enabled(LogLevel::trace);
  if (trace) {
    BRAID_LOG(trace) << what.str() << " (" << run->name() << ") count " << op.args.count << " "
                     << to_string(op.args.dtype) << " starts"
                     << (ProgressThread::on_this_thread() ? " on the progress thread" : " on the caller's thread")
                     << ", run again";
  }
  const Clock::time_point started = trace ? Clock::now() : Clock::time_point{};
  const Deadline deadline = runs_.deadline();
  std::optional<Failure> adopted;
  LoneRun work(*run, what, deadline,
               RunContext{.rank = cfg_.rank, .timeout_s = cfg_.env.timeout_s, .failure = &failure_, .adopted = &adopted});
  Status s = links_->drive_known(work, deadline);
  if (s.is_ok()) {
    failure_.note_done(std::max(failure_.done_seq(), op.seq), what);
    if (trace) {
      BRAID_LOG(trace) << what.str() << " done in "
                       << std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count()
                       << " us";
    }
    held_.complete_last(op.work, Status::ok());  // no GPU buffer: nothing to copy back
    if (run->outstanding() == 0) {
      runs_.cache().ran(run);
    } else {
      runs_.cache().drop(run);
    }
    return true;
  }
  s = failure_.on_failure(std::move(s), what.str(), op.seq, std::vector<OpRun*>{run}, std::move(adopted));
  runs_.cache().clear();  // the failure may have closed connections the kept runs name (this one too)
  op.work->complete(s);
  return true;
}

void StreamRunner::run(PendingOp& first, bool may_stream) {
  // Nothing can join an operation here (between()): one of a kept shape takes the lean path.
  if ((!may_stream || !ProgressThread::on_this_thread()) && run_kept(first)) return;
  active_.reserve(kMaxStream);
  struct ClearAtExit {
    std::vector<StreamOp>& list;
    ~ClearAtExit() { list.clear(); }
  } clear_at_exit{active_};
  run_ptrs_.clear();
  after_.clear();
  may_stream_ = may_stream;
  admit(first, nullptr);
  if (active_.empty()) return;

  what_ = active_.front().what;
  deadline_ = active_.front().deadline;
  seq_ = active_.front().op.seq;
  oldest_ = 0;
  std::optional<Failure> adopted;
  auto before_pass = [this] { between(); };
  RunSet work(run_ptrs_, after_, started_, what_, deadline_, before_pass,
              RunSet::Context{.rank = cfg_.rank, .timeout_s = cfg_.env.timeout_s, .failure = &failure_, .adopted = &adopted});
  Status s = links_->drive(work, deadline_);
  if (s.is_ok()) {
    complete_finished(true);
    for (auto& a : active_) {
      if (a.shape && a.completed && a.run->outstanding() == 0) runs_.cache().keep(*a.shape, std::move(a.run));
    }
    return;
  }
  runs_.cache().clear();  // the failure may have closed connections the kept runs name
  s = failure_.on_failure(std::move(s), what_.str(), seq_, run_ptrs_, std::move(adopted));
  for (auto& a : active_) {
    if (!a.completed) a.op.work->complete(s);
  }
}

}  // namespace braid
