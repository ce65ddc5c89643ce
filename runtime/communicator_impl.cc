#include "runtime/communicator_impl.h"

#include <algorithm>

#include "collectives/algorithms.h"
#include "collectives/ring_depth.h"

#include "collectives/runner.h"
#include "collectives/selection.h"
#include "collectives/validate.h"
#include "common/env_vars.h"
#include "common/version.h"
#include "common/job_secret.h"
#include "common/log.h"
#include "common/spin.h"
#include "runtime/bootstrap/agreed_settings.h"
#include "runtime/bootstrap/split.h"
#include "runtime/engine/op_run.h"
#include "runtime/engine/run_set.h"
#include "runtime/links/spin_policy.h"
#include "runtime/bootstrap/store_join.h"
#include "transport/registry.h"

namespace braid {
namespace {

constexpr auto kPollSlice = std::chrono::milliseconds(100);
// The hand-off (communicator_impl.h): for this long after an operation was left to its caller,
// the idle progress thread looks at the queue every tick (CommunicatorConfig::hand_off_tick)
// rather than sleeping until it is woken.
constexpr auto kLinger = std::chrono::milliseconds(50);

// Set on progress threads, so TRACE can say where an operation ran.
thread_local bool t_progress_thread = false;

bool is_p2p(collectives::Kind k) { return k == collectives::Kind::send || k == collectives::Kind::recv; }

// Before any transport is made or connection built: ranks whose settings differ would connect
// and then pair messages that do not belong together (agreed_settings.h). Every rank reads
// every card, so every rank finds a difference itself and names the same ranks.
Status agree_on_settings(Store& store, const Env& env, int rank, int size) {
  std::vector<std::string> cards(static_cast<size_t>(size));
  cards[static_cast<size_t>(rank)] = settings_card(env);
  try {
    store.set("settings/" + std::to_string(rank), cards[static_cast<size_t>(rank)]);
    RETURN_IF_ERROR(wait_for_ranks(store, "settings", "settings card", rank, size));  // saying who is late
    for (int r = 0; r < size; ++r) {
      if (r != rank) cards[static_cast<size_t>(r)] = store.get("settings/" + std::to_string(r));
    }
  } catch (const Error& e) {
    return Status(e.code(), "rank " + std::to_string(rank) + " exchanging settings through the store at " +
                                store.address() + ": " + e.what());
  }
  return check_settings(cards).with_context("rank " + std::to_string(rank) + " creating a communicator of " +
                                            std::to_string(size) + " ranks: ");
}

}  // namespace

CommunicatorImpl::CommunicatorImpl(CommunicatorConfig config)
    : cfg_(std::move(config)),
      board_(cfg_.board_store ? cfg_.board_store : cfg_.store, cfg_.rank, cfg_.size),
      p2p_send_seq_(static_cast<size_t>(cfg_.size), 0),
      p2p_recv_seq_(static_cast<size_t>(cfg_.size), 0) {}

Result<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::create(CommunicatorConfig config) {
  set_ranks_on_node(config.local_size);
  std::unique_ptr<CommunicatorImpl> impl(new CommunicatorImpl(std::move(config)));
  ASSIGN_OR_RETURN(impl->forced_algo_, collectives::parse_algo(impl->cfg_.env.algo));
  impl->thread_ = std::thread([p = impl.get()] { p->progress_main(); });
  std::unique_lock<std::mutex> lock(impl->setup_mu_);
  impl->setup_cv_.wait(lock, [&] { return impl->setup_done_; });  // bounded: connect_all has deadlines
  if (!impl->setup_status_.is_ok()) return impl->setup_status_;
  return impl;
}

CommunicatorImpl::~CommunicatorImpl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  finish_job_store();
}

// Builds one connection to every other rank, each from the transport that fits it
// (peer_links.h), after checking that every rank runs with the same settings.
Status CommunicatorImpl::connect_all() {
  static std::once_flag build_logged;
  std::call_once(build_logged, [] { BRAID_LOG(info) << build_summary(); });  // version and features
  const int rank = cfg_.rank, size = cfg_.size;
  if (size > 1) RETURN_IF_ERROR(agree_on_settings(*cfg_.store, cfg_.env, rank, size));
  LinkSetup setup;
  setup.rank = rank;
  setup.size = size;
  setup.comm_id = cfg_.comm_id;
  setup.env = cfg_.env;
  setup.master_addr = cfg_.master_addr;
  setup.inproc_fabric = cfg_.inproc_fabric;
  ASSIGN_OR_RETURN(setup.secret, Result<auth::JobSecret>(auth::process_secret()));
  ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links,
                   PeerLinks::connect(setup, *cfg_.store, Deadline::after_seconds(cfg_.env.rendezvous_timeout_s)));
  // The spin depends on where the other ranks run, which their links cards told; the transports
  // came up before those were read and take it now, before the first collective polls them.
  cfg_.env.spin_us = settle_spin(links->rank_cpus(), cfg_.env, rank).spin_us;
  links->set_spin_us(cfg_.env.spin_us);
  // Every rank sees the same cards and the same BRAID_CHUNK_BYTES (agreed settings), so every
  // rank picks the same depth (it fixes the order of a ring's messages).
  collectives::RingDepth depth =
      collectives::choose_ring_depth(static_cast<size_t>(std::max(0, cfg_.env.ring_depth)),
                                     size == 1 || links->all_host_local(), cfg_.env.chunk_bytes,
                                     static_cast<size_t>(size));
  ring_depth_ = depth.depth;
  ring_depth_why_ = std::move(depth.why);
  std::lock_guard<std::mutex> lock(links_mu_);
  links_ = std::move(links);
  return Status::ok();
}

void CommunicatorImpl::progress_main() {
  t_progress_thread = true;
  spin_only_for_waiters();
  Status s = connect_all();
  if (s.is_ok()) {
    BRAID_LOG(info) << "communicator ready: rank " << cfg_.rank << " of " << cfg_.size << " (comm " << std::hex
                    << cfg_.comm_id << std::dec << "), transport " << links_->describe() << ", timeout "
                    << cfg_.env.timeout_s << " s, operation headers on, ring depth " << ring_depth_ << " ("
                    << ring_depth_why_ << "), algorithms "
                    << (cfg_.env.algo == "auto" ? "by size: " + collectives::describe_selection(cfg_.size)
                                                : cfg_.env.algo + " (BRAID_ALGO) where the collective has it")
                    << "; waiters spin " << cfg_.env.spin_us << " us";
  }
  if (s.is_ok()) {
    // Each peer's own transport (shm, ib or tcp), as the links chose it.
    peer_transports_.resize(static_cast<size_t>(cfg_.size));
    for (int r = 0; r < cfg_.size; ++r) {
      peer_transports_[static_cast<size_t>(r)] = r == cfg_.rank ? std::string("self") : links_->transport_name(r);
    }
  }
  {
    std::lock_guard<std::mutex> lock(setup_mu_);
    setup_status_ = s;
    setup_done_ = true;
  }
  setup_cv_.notify_all();
  if (!s.is_ok()) return;

  uint64_t taken = 0;  // operations pushed to the queue that had left it after the last pass
  bool worked = false;  // the last pass ran an operation
  for (;;) {
    // A wake-up through the condition variable costs far more than a short spin, and back-to-back
    // operations (the common case in a training step or a benchmark) arrive within one.
    if (worked) {
      auto spin_end = Clock::now() + std::chrono::microseconds(cfg_.env.spin_us);
      SpinScope spin;
      // Yield, never pause: the next operation comes from a caller that may share this CPU.
      while (enqueued_.load(std::memory_order_acquire) == taken && Clock::now() < spin_end) std::this_thread::yield();
    }
    std::optional<Pending> op;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wait_for_work(lock, Clock::now() + RunSet::kBoardInterval);
      // Another thread runs operations (a caller on its own thread): it watches the failure
      // board while it waits, and hands back what it leaves queued when it is done.
      if (busy_) {
        worked = false;
        continue;
      }
      busy_ = true;
      if (!queue_.empty()) {
        // Its caller did not come for it in time (or queued more first): it computes meanwhile,
        // and its next operation starts at once.
        if (callers_wait_ && queue_.front().work.get() == idle_work_) {
          callers_wait_ = false;
          idle_work_ = nullptr;
        }
        op = std::move(queue_.front());
        queue_.pop_front();
      } else {
        stop = stopping_;  // stopping, and everything queued has run
      }
    }
    if (abort_requested_.load() && state() == CommState::ok) handle_abort();
    worked = op.has_value();
    if (op) {
      ran_on_progress_.fetch_add(1, std::memory_order_relaxed);
      hold_last_ = true;
      run_one(*op);
      hold_last_ = false;
      if (cfg_.after_progress_op) cfg_.after_progress_op();
    } else if (stop) {
      break;  // busy_ stays set: nothing runs after this
    } else {
      idle_check();
    }
    // What has left the queue by now (this pass's pop, what run_stream took, what callers ran
    // themselves) is read in the same critical section that releases busy_: the spin above
    // waits for anything beyond it.
    release_busy(&taken);
    complete_held();
  }
  BRAID_LOG(trace) << "rank " << cfg_.rank << " closing: " << ran_on_caller_.load() << " operations ran on callers' threads, "
                   << ran_on_progress_.load() << " on the progress thread";
  run_cache_.clear();  // the kept runs name the connections
  close_connections({});
  std::lock_guard<std::mutex> lock(links_mu_);
  links_.reset();
}

void CommunicatorImpl::wait_for_work(std::unique_lock<std::mutex>& lock, Clock::time_point board_at) {
  const auto tick = cfg_.hand_off_tick;
  for (;;) {
    if (!busy_ && (stopping_ || (abort_requested_.load() && state() == CommState::ok))) break;
    const auto now = Clock::now();
    if (now >= board_at) break;
    Clock::time_point until = board_at;
    if (!busy_ && !queue_.empty()) {
      // One operation left to its caller (help) until its grace ends; a second one queued
      // means the caller did not wait for the first.
      if (queue_.size() > 1 || now >= grace_until_) break;
      until = std::min(until, now + tick);
    } else if (now < linger_until_) {
      until = std::min(until, now + tick);
    }
    // Never a wait shorter than a tick: a timer due sooner is costly to arm (the top).
    progress_wakes_at_ = until;
    cv_.wait_until(lock, until);
    progress_wakes_at_ = Clock::time_point::min();
  }
}

bool CommunicatorImpl::queued_locked(bool idle_before, const std::shared_ptr<detail::WorkState>& work) {
  enqueued_.fetch_add(1, std::memory_order_release);
  if (!cfg_.env.caller_progress || !idle_before || cfg_.hand_off_tick.count() <= 0) return true;
  const auto now = Clock::now();
  if (idle_times_) {
    // The last prediction, settled after the fact: its operation finished before its caller
    // waited (the progress thread took it), so no wait reached help(); when that wait came
    // decides, as it would have there. Never waited (another operation came first): computes.
    const int64_t waited = idle_times_->first_wait_ns.load(std::memory_order_relaxed);
    const int64_t returned = idle_times_->returned_ns.load(std::memory_order_relaxed);
    callers_wait_ = waited != 0 && std::chrono::nanoseconds(waited - returned) < cfg_.waits_at_once;
  }
  idle_work_ = work.get();
  work->timed = true;
  idle_times_ = std::shared_ptr<detail::WorkState::WaitTimes>(work, &work->wait_times);  // no allocation
  if (!callers_wait_) return true;  // the caller computes meanwhile: start it at once
  grace_until_ = now + cfg_.hand_off_tick;
  linger_until_ = now + kLinger;
  // Awake (it looks at the queue before it waits again) or ticking: no wake-up, which would cost
  // the caller about as much as the operation it is about to run.
  return progress_wakes_at_ > now + cfg_.hand_off_tick;
}

void CommunicatorImpl::run_one(Pending& op, bool may_stream) {
  if (!op.group.empty()) {
    run_group(op);
    return;
  }
  run_stream(op, may_stream);
}

Result<CommunicatorImpl::MadeRun> CommunicatorImpl::make_run(const Pending& op, const collectives::RunOptions& options,
                                                             const std::optional<RunShape>& shape) {
  if (std::unique_ptr<OpRun> run = shape ? run_cache_.take(*shape) : nullptr) {
    RETURN_IF_ERROR(run->reuse(op.args, cfg_.comm_id, op.seq, op.match_seq, options.op_id));
    MadeRun m{nullptr, true, run->name(), run->algo()};
    m.run = std::move(run);
    return m;
  }
  ASSIGN_OR_RETURN(collectives::PreparedCollective prepared,
                   collectives::prepare_collective(op.args, cfg_.rank, cfg_.size, links_->capabilities(),
                                                   links_->peers(), options));
  // INFO says which algorithm each collective uses, once per (collective, algorithm, size
  // class) rather than per call, so a training loop's log stays readable.
  if (log_enabled(LogLevel::info) && prepared.executor != nullptr) {
    size_t bytes = op.args.count * dtype_size(op.args.dtype);
    int size_class = 0;
    while (bytes > 1 && size_class < 63) bytes >>= 1, ++size_class;
    if (algo_logged_.insert((static_cast<int>(op.args.kind) << 16) | (static_cast<int>(prepared.algo) << 8) | size_class).second) {
      BRAID_LOG(info) << OpLabel::one(op.args.kind, op.seq).str() << ": " << prepared.name << " for " << op.args.count
                      << " x " << to_string(op.args.dtype) << " (" << op.args.count * dtype_size(op.args.dtype)
                      << " bytes)";
    }
  }
  MadeRun m{nullptr, false, prepared.name, prepared.algo};
  if (prepared.executor != nullptr) {
    m.run = std::make_unique<OpRun>(std::move(prepared), op.args, cfg_.rank, cfg_.comm_id, op.seq, op.match_seq,
                                    links_->peers());
  }
  return m;
}

// One operation, plus (on the progress thread) the ones queued behind it, overlapped: the next
// starts as soon as the newest has posted every send and receive, so its messages queue behind
// those on each connection, which is all the in-order matching of connections needs. The tail
// of one operation (its last segments crossing the ring) then overlaps the head of the next.
void CommunicatorImpl::run_stream(Pending& first, bool may_stream) {
  // Never more than kMaxStream (between() checks), so references stay valid as it grows; emptied
  // on every way out, which ends what it holds (the operations taken from the queue, the runs
  // not kept) as a local list would.
  std::vector<StreamOp>& active = stream_ops_;
  active.reserve(kMaxStream);
  struct ClearAtExit {
    std::vector<StreamOp>& list;
    ~ClearAtExit() { list.clear(); }
  } clear_at_exit{active};
  std::vector<OpRun*>& runs = stream_runs_;
  std::vector<int>& after = stream_after_;
  runs.clear();
  after.clear();

  // Prepares `op`; an operation with nothing to move completes at once, one that failed to
  // prepare completes with its error (nothing was sent: the communicator stays usable).
  auto admit = [&](Pending& op, std::unique_ptr<Pending> taken) {
    const OpLabel what = OpLabel::one(op.args.kind, op.seq);
    if (state() != CommState::ok) {
      op.work->complete(fail_fast_status(what.str()));
      return;
    }
    collectives::RunOptions options;
    // BRAID_ALGO is a preference for the whole job: collectives that have no such algorithm
    // (all_to_all has only pairwise) keep the automatic choice instead of failing.
    options.algo = collectives::supports(op.args.kind, forced_algo_) ? forced_algo_ : collectives::Algo::automatic;
    options.chunk_bytes = cfg_.env.chunk_bytes;
    options.ring_depth = ring_depth_;
    options.order = links_->ring_order();
    options.deadline = Deadline::after_seconds(cfg_.env.timeout_s);
    options.op_id = op.seq & 0x7fffffffu;  // executor cookies keep bit 63 clear (op_run.h)
    if (op.device) {  // the GPU must have finished what was queued before the call
      Status ready = op.device->wait_input(options.deadline, [this] { return abort_requested_.load(); });
      if (!ready.is_ok()) {
        op.work->complete(ready.with_context(what.str() + " on rank " + std::to_string(cfg_.rank) + ": "));
        return;
      }
    }
    // A finished run of the same shape is run again; otherwise one is prepared (OpRun::reuse).
    const std::optional<RunShape> shape = RunCache::shape_of(op.args, op.device != nullptr, options.algo);
    auto made = make_run(op, options, shape);
    if (!made.is_ok()) {
      op.work->complete(made.status().with_context(what.str() + ": "));
      return;
    }
    std::unique_ptr<OpRun> run = std::move(made.value().run);
    last_algo_.store(static_cast<int>(made.value().algo), std::memory_order_relaxed);
    BRAID_LOG(trace) << what.str() << " (" << made.value().name << ") count " << op.args.count << " "
                     << to_string(op.args.dtype) << " starts"
                     << (t_progress_thread ? " on the progress thread" : " on the caller's thread")
                     << (made.value().reused ? ", run again" : "")
                     << (active.empty() ? "" : " (overlapping " + active.back().what.str() + ")");
    if (run == nullptr) {
      done_seq_ = op.seq;
      done_what_ = what;
      op.work->complete(finish_device(op, options.deadline, what));
      return;
    }
    runs.push_back(run.get());
    after.push_back(-1);
    active.push_back(StreamOp{op, std::move(taken), what, std::move(run), options.deadline, Clock::now(), shape});
  };
  admit(first, nullptr);
  if (active.empty()) return;

  // The oldest unfinished operation: the one a timeout or failure is reported against.
  OpLabel what = active.front().what;
  Deadline deadline = active.front().deadline;
  uint64_t seq = active.front().op.seq;
  size_t oldest = 0;
  // last: drive() has returned, nothing of this stream is left running (complete_last).
  auto complete_finished = [&](bool last) {
    for (auto& a : active) {
      if (a.completed || !a.run->done()) continue;
      a.completed = true;
      done_seq_ = std::max(done_seq_, a.op.seq);
      done_what_ = a.what;
      BRAID_LOG(trace) << a.what.str() << " done in "
                       << std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - a.started).count()
                       << " us";
      Status s = finish_device(a.op, a.deadline, a.what);
      if (last) {
        complete_last(a.op.work, std::move(s));
      } else {
        a.op.work->complete(std::move(s));
      }
    }
    while (oldest < active.size() && active[oldest].completed) ++oldest;
    if (oldest < active.size()) {
      what = active[oldest].what;
      deadline = active[oldest].deadline;
      seq = active[oldest].op.seq;
    }
  };
  // Only the progress thread takes more: a caller running its own blocking call returns with it.
  auto between = [&] {
    complete_finished(false);
    if (!may_stream || !t_progress_thread || active.size() >= kMaxStream || !active.back().run->all_posted()) return;
    std::unique_ptr<Pending> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // An operation on GPU buffers joins only once the GPU has passed its input: waiting for
      // it here would stall the operations already running.
      if (!queue_.empty() && queue_.front().group.empty() && !abort_requested_.load() &&
          (!queue_.front().device || queue_.front().device->input_ready())) {
        next = std::make_unique<Pending>(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (next) {
      ran_on_progress_.fetch_add(1, std::memory_order_relaxed);
      Pending& op = *next;
      admit(op, std::move(next));
    }
  };
  std::optional<Failure> adopted;
  Status s = drive(runs, after, what, deadline, &adopted, between);
  if (s.is_ok()) {
    complete_finished(true);
    for (auto& a : active) {
      if (a.shape && a.completed && a.run->outstanding() == 0) run_cache_.keep(*a.shape, std::move(a.run));
    }
    return;
  }
  run_cache_.clear();  // the failure may have closed connections the kept runs name
  s = on_failure(std::move(s), what.str(), seq, runs, std::move(adopted));
  for (auto& a : active) {
    if (!a.completed) a.op.work->complete(s);
  }
}

Status CommunicatorImpl::drive(const std::vector<OpRun*>& runs, const std::vector<int>& after, const OpLabel& what,
                               const Deadline& deadline, std::optional<Failure>* adopted,
                               FunctionRef<void()> between) {
  RunSet work(runs, after, drive_started_, what, deadline, between,
              RunSet::Context{.rank = cfg_.rank,
                              .timeout_s = cfg_.env.timeout_s,
                              .abort_requested = &abort_requested_,
                              .board = &board_,
                              .adopted = adopted,
                              .failed_peer = &failed_peer_});
  return links_->drive(work, deadline);
}

std::string CommunicatorImpl::last_algorithm() const {
  return collectives::to_string(static_cast<collectives::Algo>(last_algo_.load(std::memory_order_relaxed)));
}

bool CommunicatorImpl::admit_locked(collectives::CollectiveArgs&& args, const std::shared_ptr<detail::WorkState>& work,
                                    Pending* out) {
  const uint64_t seq = ++next_seq_;
  // The k-th send from A to B meets the k-th receive on B from A: one count per direction.
  auto& p2p = args.kind == collectives::Kind::send ? p2p_send_seq_ : p2p_recv_seq_;
  const uint64_t match = is_p2p(args.kind) ? ++p2p[static_cast<size_t>(args.peer)] : ++collective_seq_;
  if (state() != CommState::ok || abort_requested_.load()) {
    work->complete(fail_fast_status(std::string(collectives::to_string(args.kind)) + " #" + std::to_string(seq)));
    return false;
  }
  if (cfg_.env.caller_progress) work->comm = this;
  if (group_depth_ > 0) {
    work->in_open_group.store(true);
    group_ops_.push_back(Pending{std::move(args), work, seq, match, {}, nullptr});
    return false;
  }
  *out = Pending{std::move(args), work, seq, match, {}, nullptr};
  return true;
}

std::unique_ptr<DeviceStaging> CommunicatorImpl::stage_device(collectives::CollectiveArgs& args,
                                                              const std::shared_ptr<detail::WorkState>& work) {
  const auto what = [&] { return std::string(collectives::to_string(args.kind)) + " on rank " + std::to_string(cfg_.rank) + ": "; };
  auto staged = DeviceStaging::stage(device_api(), args, cfg_.rank, cfg_.size, stream(), [this] {
    std::call_once(staging_once_, [this] { staging_pool_ = std::make_shared<StagingPool>(cfg_.env.cuda_staging_bytes, cfg_.env.cuda_reduce); });
    return staging_pool_;
  });
  if (!staged.is_ok()) raise_if_error(staged.status().with_context(what()));
  std::unique_ptr<DeviceStaging> device = std::move(staged).value();
  if (!device) return device;  // host buffers: the common case costs a pointer lookup or two
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (group_depth_ > 0) {
      raise_if_error(invalid_argument(what() + "GPU buffers inside group_start()/group_end() are not supported yet: "
                                               "issue the call outside the group"));
    }
  }
  // The stream's hold outlasts the operation's own timeout by a margin: the Work ends by then.
  Status held = device->hold_stream(work, cfg_.env.timeout_s + 60);
  if (!held.is_ok()) raise_if_error(held.with_context(what()));
  return device;
}

Status CommunicatorImpl::finish_device(Pending& op, const Deadline& deadline, const OpLabel& what) {
  if (!op.device) return Status::ok();
  return op.device->finish(deadline).with_context(what.str() + ": ");
}

Work CommunicatorImpl::enqueue(collectives::CollectiveArgs args) {
  raise_if_error(collectives::validate_collective(args, cfg_.rank, cfg_.size));
  auto work = std::make_shared<detail::WorkState>();
  std::unique_ptr<DeviceStaging> device = stage_device(args, work);
  if (device && device->pipelined()) return enqueue_chunks(std::move(device), work);
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Pending op;
    if (!admit_locked(std::move(args), work, &op)) return Work(work);
    op.device = std::move(device);
    const bool idle = !busy_ && queue_.empty();
    queue_.push_back(std::move(op));
    wake = queued_locked(idle, work);
  }
  if (wake) wake_progress();
  work->note_returned();
  return Work(work);
}

void CommunicatorImpl::run(collectives::CollectiveArgs args) {
  raise_if_error(collectives::validate_collective(args, cfg_.rank, cfg_.size));
  auto work = std::make_shared<detail::WorkState>();
  std::unique_ptr<DeviceStaging> device = stage_device(args, work);
  if (device && device->pipelined()) return enqueue_chunks(std::move(device), work).wait();
  Pending op;
  bool here = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (admit_locked(std::move(args), work, &op)) {
      op.device = std::move(device);
      here = cfg_.env.caller_progress && !busy_ && queue_.empty();
      if (here) {
        busy_ = true;
      } else {
        queue_.push_back(std::move(op));
        (void)queued_locked(false, nullptr);  // queued behind another: no hand-off to predict
      }
    }
  }
  if (here) {
    run_here(op);
  } else {
    cv_.notify_one();
  }
  Work(work).wait();  // done already when it ran here; raises its error
}

void CommunicatorImpl::help(const detail::WorkState& work, int64_t waited_ns) {
  Pending op;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Whether the caller waits at once for what it queued on an idle communicator, whoever runs
    // it: the prediction for the next one (queued_locked).
    if (&work == idle_work_) {
      const int64_t returned = idle_times_->returned_ns.load(std::memory_order_relaxed);
      const auto at = waited_ns != 0 ? std::chrono::nanoseconds(waited_ns) : Clock::now().time_since_epoch();
      const auto since = at - std::chrono::nanoseconds(returned);
      callers_wait_ = returned == 0 || since < cfg_.waits_at_once;
      idle_work_ = nullptr;
      idle_times_ = nullptr;
    }
    if (busy_ || queue_.size() != 1 || work.done()) return;
    const Pending& front = queue_.front();
    bool mine = front.work.get() == &work;
    for (const auto& m : front.group) mine = mine || m.work.get() == &work;
    if (!mine) return;
    op = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    grace_until_ = {};
  }
  run_here(op);
}

void CommunicatorImpl::run_here(Pending& op) {
  ran_on_caller_.fetch_add(1, std::memory_order_relaxed);
  run_one(op);
  release_busy();
}

void CommunicatorImpl::wake_progress() {
  cv_.notify_one();
  if (cfg_.after_wake) cfg_.after_wake();
}

void CommunicatorImpl::complete_last(const std::shared_ptr<detail::WorkState>& work, Status s) {
  std::lock_guard<std::mutex> lock(held_mu_);
  if (hold_last_) {
    held_.emplace_back(work, std::move(s));
    return;
  }
  for (auto& [w, st] : held_) w->complete(std::move(st));  // ran before this one
  held_.clear();
  work->complete(std::move(s));
}

void CommunicatorImpl::complete_held() {
  if (cfg_.before_held_complete) {
    bool any = false;
    {
      std::lock_guard<std::mutex> lock(held_mu_);
      any = !held_.empty();
    }
    if (any) cfg_.before_held_complete();
  }
  std::lock_guard<std::mutex> lock(held_mu_);
  for (auto& [work, s] : held_) work->complete(std::move(s));
  held_.clear();
}

void CommunicatorImpl::release_busy(uint64_t* dequeued) {
  bool more;
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
    more = !queue_.empty() || stopping_ || abort_requested_.load();
    if (dequeued != nullptr) *dequeued = enqueued_.load(std::memory_order_relaxed) - queue_.size();
  }
  if (more) cv_.notify_one();
}

void CommunicatorImpl::wake_transport() {
  std::lock_guard<std::mutex> lock(links_mu_);
  if (links_) links_->wake();
}

// A rank that finishes early may leave; only the rank serving the store must stay until
// every rank is done with it (bounded), or the late ones would lose their store. After a
// failure some ranks may never come: the wait is then short. What this communicator kept in
// the store goes as its ranks leave (leave_store).
void CommunicatorImpl::finish_job_store() {
  if (!cfg_.store) return;
  const bool failed = state() != CommState::ok;
  // After a failure the store may be what failed (its server stopped or dead): the failure
  // board found out already, at the cost of one bounded call, and then nothing is asked of it.
  if (failed && board_.store_unreachable()) {
    BRAID_LOG(warn) << "rank " << cfg_.rank << " leaving without telling the store: " << store_trouble();
    return;
  }
  // The board's connection has the failure-report bound; the program's may wait minutes.
  Store& store = failed && cfg_.board_bounded ? *cfg_.board_store : *cfg_.store;
  try {
    const bool lingering = cfg_.server != nullptr;
    if (leave_store(store, cfg_.rank, cfg_.size, lingering) < cfg_.size && lingering) {
      const double bound = !failed ? std::min(cfg_.env.rendezvous_timeout_s, 60.0) : 3.0;
      Deadline deadline = Deadline::after_seconds(bound);
      while (!everyone_left(store, cfg_.size) && !deadline.expired()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  } catch (const Error& e) {
    // A store the program handed in (torch's lives in its rank 0) may go first at a clean exit.
    if (!failed && cfg_.foreign_store) {
      BRAID_LOG(info) << "rank " << cfg_.rank << " leaving: the program's store is gone already (" << e.what() << ")";
    } else {
      BRAID_LOG(warn) << "rank " << cfg_.rank << " leaving: the store is gone (" << e.what() << ")";
    }
  }
}

// A child communicator over some ranks of this one (bootstrap/split.h): every rank's card goes
// round the parent, and those whose color matches make the child from the same cards.
Result<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::split(int color, int key) {
  if (color < 0 && color != Communicator::kNoColor) {
    return invalid_argument("split: color " + std::to_string(color) + " is negative; use a color >= 0, or "
                            "Communicator::kNoColor to stay out of every new communicator");
  }
  const uint64_t n = ++split_count_;
  std::vector<int64_t> mine = split_card(color, key);
  std::vector<int64_t> all(static_cast<size_t>(cfg_.size) * kSplitCardWords);
  collectives::CollectiveArgs args;
  args.kind = collectives::Kind::all_gather;
  args.send = mine.data();
  args.recv = all.data();
  args.count = kSplitCardWords;
  args.dtype = DType::i64;
  Work gathered = enqueue(std::move(args));
  gathered.wait();
  if (color == Communicator::kNoColor) return std::unique_ptr<CommunicatorImpl>();
  return create(split_config(cfg_, n, color, all));
}

}  // namespace braid
