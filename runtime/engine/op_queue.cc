#include "runtime/engine/op_queue.h"

#include <string>
#include <utility>

#include "braid/error.h"
#include "runtime/failure/comm_failure.h"

namespace braid {
namespace {

bool is_p2p(collectives::Kind k) { return k == collectives::Kind::send || k == collectives::Kind::recv; }

}  // namespace

OpQueue::OpQueue(const CommunicatorConfig& cfg, const CommFailure& failure, detail::WorkRunner* runner)
    : cfg_(cfg),
      failure_(failure),
      runner_(runner),
      hand_off_(cfg.env.caller_progress && cfg.hand_off_tick.count() > 0, cfg.hand_off_tick, cfg.waits_at_once),
      p2p_send_seq_(static_cast<size_t>(cfg.size), 0),
      p2p_recv_seq_(static_cast<size_t>(cfg.size), 0) {}

bool OpQueue::refusing() const { return failure_.state() != CommState::ok || failure_.abort_requested(); }

void OpQueue::number(PendingOp& op) {
  op.seq = ++next_seq_;
  // The k-th send from A to B meets the k-th receive on B from A: one count per direction.
  const collectives::Kind kind = op.args.kind;
  auto& p2p = kind == collectives::Kind::send ? p2p_send_seq_ : p2p_recv_seq_;
  op.match_seq = is_p2p(kind) ? ++p2p[static_cast<size_t>(op.args.peer)] : ++collective_seq_;
}

bool OpQueue::hold_in_group(collectives::CollectiveArgs&& args, std::shared_ptr<detail::WorkState>& work) {
  GroupGuard guard(group_lock_);
  if (group_depth_.load(std::memory_order_relaxed) == 0) return false;
  // Read by wait() on the same Work, which only rejects a wait that came too early: no order
  // with anything else.
  work->in_open_group.store(true, std::memory_order_relaxed);
  if (cfg_.env.caller_progress) work->runner = runner_;
  // Each group takes its list whole (close_group): room for a send/recv pair from the start.
  if (group_ops_.capacity() == 0) group_ops_.reserve(4);
  group_ops_.push_back(PendingOp{std::move(args), std::move(work)});  // built from them, not assigned over an empty one
  return true;
}

bool OpQueue::admit(collectives::CollectiveArgs&& args, std::shared_ptr<detail::WorkState> work, PendingOp* out) {
  if (refusing()) {
    PendingOp refused;  // numbered all the same, as every rank numbers what it issued
    refused.args.kind = args.kind;
    refused.args.peer = args.peer;
    number(refused);
    work->complete(failure_.fail_fast_status(std::string(collectives::to_string(args.kind)) + " #" +
                                             std::to_string(refused.seq)));
    return false;
  }
  if (group_depth_.load(std::memory_order_relaxed) != 0 && hold_in_group(std::move(args), work)) return false;
  if (cfg_.env.caller_progress) work->runner = runner_;
  // Filled in place (out is an empty PendingOp: the queue's slot, the engine's or the caller's):
  // no whole operation built and moved over it.
  out->args = std::move(args);
  out->work = std::move(work);
  number(*out);
  return true;
}

bool OpQueue::queued(bool idle_before, const std::shared_ptr<detail::WorkState>& work) {
  enqueued_.fetch_add(1, std::memory_order_release);
  // The last operation left in the slot and taken by its caller: the hand-off's prediction
  // first learns how soon that caller came for it.
  if (idle_before && slot_wait_span_.load(std::memory_order_relaxed) >= 0) {
    hand_off_.took_in_slot(slot_wait_span_.exchange(-1, std::memory_order_relaxed));
  }
  return hand_off_.queued(idle_before, work);
}

void OpQueue::wake_progress() {
  cv_.notify_one();
  if (cfg_.after_wake) cfg_.after_wake();
}

Work OpQueue::push(collectives::CollectiveArgs&& args, std::shared_ptr<detail::WorkState> work,
                   std::unique_ptr<DeviceStaging> device) {
  detail::WorkState* const w = work.get();
  Work result(work);  // the caller's share; `work` itself goes where the operation waits
  // A group's member, held without mu_ (see the top); admit() refuses it when the communicator
  // can no longer run it.
  if (group_depth_.load(std::memory_order_relaxed) != 0 && !refusing() && hold_in_group(std::move(args), work)) {
    return result;
  }
  bool wake;
  {
    MutexLock lock(mu_);
    const bool was_idle = idle();
    const bool in_slot = was_idle && cfg_.env.caller_progress;
    PendingOp& op = in_slot ? slot_ : queue_.push_slot();  // filled where it waits
    if (!admit(std::move(args), std::move(work), &op)) {
      if (!in_slot) queue_.pop_back();
      return result;
    }
    op.device = std::move(device);
    wake = queued(was_idle, op.work);
    if (in_slot) {
      engine_.store(word_of(w), std::memory_order_seq_cst);  // filled before it is named
    } else {
      published();
    }
  }
  if (wake) {
    wake_progress();
    w->note_returned();  // after the wake-up, which is not the caller's time (hand_off.h)
  }
  return result;
}

bool OpQueue::push_or_take(collectives::CollectiveArgs&& args, const std::shared_ptr<detail::WorkState>& work,
                           std::unique_ptr<DeviceStaging> device, PendingOp* op) {
  bool here = false;
  {
    MutexLock lock(mu_);
    if (admit(std::move(args), work, op)) {
      op->device = std::move(device);
      here = cfg_.env.caller_progress && idle();
      if (here) {
        engine_.store(kHeld, std::memory_order_seq_cst);  // free, and only mu_'s holders take a free engine
      } else {
        queue_.push_back(std::move(*op));
        published();
        (void)queued(false, nullptr);  // queued behind another: no hand-off to predict
      }
    }
  }
  if (!here) cv_.notify_one();
  return here;
}

namespace {

// Whether `op` is `work`'s operation or a group that holds it.
bool holds(const PendingOp& op, const detail::WorkState& work) {
  if (op.work.get() == &work) return true;
  for (const auto& m : op.group) {
    if (m.work.get() == &work) return true;
  }
  return false;
}

}  // namespace

PendingOp* OpQueue::take_for_wait_locked(const detail::WorkState& work, int64_t waited) {
  MutexLock lock(mu_);
  hand_off_.waited(work, waited);
  if (work.done()) return nullptr;
  uintptr_t e = engine_.load(std::memory_order_seq_cst);
  if (e == kHeld) return nullptr;
  if (e != kFree) {
    // A group whose member this is waits in the slot. With the fifo empty nothing else can be
    // pending, so what the slot holds is this operation's group; claimed before it is looked at,
    // which another waiter may do at the same time.
    if (!queue_.empty() || !engine_.compare_exchange_strong(e, kHeld, std::memory_order_seq_cst)) return nullptr;
    hand_off_.taken_by_caller();
    return &slot_;
  }
  if (queue_.size() != 1 || !holds(queue_.front(), work)) return nullptr;
  slot_ = std::move(queue_.front());  // the slot is the holder's, and the engine is free: empty
  queue_.pop_front();
  published();
  engine_.store(kHeld, std::memory_order_seq_cst);
  hand_off_.taken_by_caller();
  return &slot_;
}

Work OpQueue::push_chunks(DeviceStaging& staged, const std::shared_ptr<detail::WorkState>& work) {
  {
    // Under mu_: the chunks take their slots' turns in the order the operations are queued.
    MutexLock lock(mu_);
    auto chunks = staged.chunks(work);
    if (!chunks.is_ok()) {
      work->complete(chunks.status().with_context("staging a collective on GPU " + std::to_string(staged.device()) +
                                                  " on rank " + std::to_string(cfg_.rank) + ": "));
      return Work(work);
    }
    for (DeviceStaging::Chunk& c : chunks.value()) {
      PendingOp op;
      // A refused chunk is completed with the reason, and its staging fails the operation.
      if (!admit(std::move(c.args), c.work, &op)) continue;
      op.device = std::move(c.staging);
      queue_.push_back(std::move(op));
      enqueued_.fetch_add(1, std::memory_order_release);
    }
    published();
  }
  cv_.notify_one();
  return Work(work);
}

void OpQueue::open_group() {
  GroupGuard guard(group_lock_);
  group_depth_.store(group_depth_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

bool OpQueue::group_open() { return group_depth_.load(std::memory_order_relaxed) > 0; }

Work OpQueue::close_group() {
  auto work = detail::make_work_state();
  detail::WorkState* const w = work.get();
  bool wake = false;
  {
    MutexLock lock(mu_);
    std::vector<PendingOp> members;
    {
      GroupGuard guard(group_lock_);
      const int depth = group_depth_.load(std::memory_order_relaxed);
      if (depth == 0) throw Error(ErrorCode::invalid_argument, "group_end() without a matching group_start()");
      group_depth_.store(depth - 1, std::memory_order_relaxed);
      if (depth > 1) return Work();  // nested: the outermost group_end runs everything
      members.swap(group_ops_);
    }
    for (auto& m : members) {
      m.work->in_open_group.store(false, std::memory_order_relaxed);
      number(m);
    }
    if (members.empty()) return Work();
    const bool was_idle = idle();
    const bool in_slot = was_idle && cfg_.env.caller_progress;
    PendingOp& g = in_slot ? slot_ : queue_.push_slot();  // filled where it waits, the members' list handed over whole
    if (cfg_.env.caller_progress) w->runner = runner_;
    g.work = work;
    g.seq = members.front().seq;
    g.group.swap(members);
    wake = queued(was_idle, work);  // a group is handed off like any operation
    if (in_slot) {
      engine_.store(word_of(w), std::memory_order_seq_cst);
    } else {
      published();
    }
    // The slot's list from the last group that ran there, emptied, keeps its room for the next
    // group's members (a send/recv loop then allocates no list per step).
    if (members.capacity() != 0) {
      GroupGuard guard(group_lock_);
      if (group_ops_.capacity() == 0) group_ops_.swap(members);
    }
  }
  if (wake) {
    wake_progress();
    w->note_returned();  // after the wake-up, which is not the caller's time (hand_off.h)
  }
  return Work(std::move(work));
}

void OpQueue::wait_for_work(MutexLock& lock, Clock::time_point board_at) {
  for (;;) {
    const uintptr_t e = engine_.load(std::memory_order_seq_cst);
    const bool held = e == kHeld;
    if (!held && (stopping_.load(std::memory_order_relaxed) || failure_.abort_pending())) break;
    const size_t queued = held ? 0 : queue_.size() + (e != kFree ? 1 : 0);
    const std::optional<Clock::time_point> until = hand_off_.sleep_until(Clock::now(), board_at, queued, held);
    if (!until) break;
    hand_off_.sleeping(*until, held);
    cv_.wait_until(lock, *until);
    hand_off_.awake();
    progress_wakeups_.fetch_add(1, std::memory_order_relaxed);
  }
}

OpQueue::Turn OpQueue::next_turn(Clock::time_point board_at, std::optional<PendingOp>* op) {
  MutexLock lock(mu_);
  wait_for_work(lock, board_at);
  uintptr_t e = engine_.load(std::memory_order_seq_cst);
  if (e == kHeld) return Turn::elsewhere;
  if (e != kFree) {
    // The operation in the engine's slot, past its grace or with more behind it; unless its
    // caller took it a moment ago.
    if (!engine_.compare_exchange_strong(e, kHeld, std::memory_order_seq_cst)) return Turn::elsewhere;
    hand_off_.taken_by_progress(slot_.work);
    op->emplace(std::move(slot_));
    return Turn::run;
  }
  engine_.store(kHeld, std::memory_order_seq_cst);
  if (queue_.empty()) return stopping_.load(std::memory_order_relaxed) ? Turn::stop : Turn::idle;
  hand_off_.taken_by_progress(queue_.front().work);
  op->emplace(std::move(queue_.front()));
  queue_.pop_front();
  published();
  return Turn::run;
}

std::unique_ptr<PendingOp> OpQueue::take_next_for_stream() {
  std::unique_ptr<PendingOp> next;
  {
    MutexLock lock(mu_);
    // An operation on GPU buffers joins only once the GPU has passed its input: waiting for
    // it here would stall the operations already running.
    if (!queue_.empty() && queue_.front().group.empty() && !failure_.abort_requested() &&
        (!queue_.front().device || queue_.front().device->input_ready())) {
      next = std::make_unique<PendingOp>(std::move(queue_.front()));
      queue_.pop_front();
      published();
    }
  }
  if (next) count_on_progress();
  return next;
}

void OpQueue::hand_over(uint64_t* dequeued) {
  bool more;
  {
    MutexLock lock(mu_);
    more = !queue_.empty() || stopping_.load(std::memory_order_relaxed) || failure_.abort_requested();
    if (dequeued != nullptr) *dequeued = enqueued_.load(std::memory_order_relaxed) - queue_.size();
  }
  if (more) cv_.notify_one();
}

std::vector<PendingOp> OpQueue::cancel_all() {
  std::vector<PendingOp> queued;
  {
    MutexLock lock(mu_);
    // The operation in the engine's slot ran first; its caller may be taking it right now.
    uintptr_t e = engine_.load(std::memory_order_seq_cst);
    if (e != kFree && e != kHeld && engine_.compare_exchange_strong(e, kHeld, std::memory_order_seq_cst)) {
      queued.push_back(std::move(slot_));
      engine_.store(kFree, std::memory_order_seq_cst);
    }
    while (!queue_.empty()) queued.push_back(queue_.take_front());
    published();
    GroupGuard guard(group_lock_);
    for (auto& p : group_ops_) queued.push_back(std::move(p));
    group_ops_.clear();
  }
  return queued;
}

void OpQueue::wake_all() { cv_.notify_all(); }

void OpQueue::stop() {
  {
    MutexLock lock(mu_);
    stopping_.store(true, std::memory_order_seq_cst);
  }
  cv_.notify_all();
}

}  // namespace braid
