// runtime/communicator_impl.h - what stands behind a braid::Communicator.
//
// One progress thread per communicator builds the connections and then runs queued operations
// in issue order. Callers enqueue and get a Work. A blocking call (or Work::wait()) whose
// communicator has nothing else queued or running runs the operation on the caller's own thread
// instead (BRAID_CALLER_PROGRESS): waking the progress thread and then the caller again costs
// two scheduler wake-ups per operation (docs/performance.md has what they cost). Exactly one
// thread at a time runs operations and touches the transport: the one that set busy_. The
// transport follows it (an io_uring ring changes owner only while no I/O is in flight, which
// holds between operations: a send completes only after its zero-copy notification).
//
// The hand-off of an *_async operation queued on an idle communicator. A program either waits
// for it at once (`_async(...).wait()`, a benchmark, a latency-bound loop), and it should run on
// the caller's thread as the blocking call does, or computes meanwhile, and the progress thread
// should start it at once. The communicator predicts which from the last such operation:
//   - the caller waited for it at once (CommunicatorConfig::waits_at_once): the next one is
//     left to the caller, without waking the progress thread, which instead looks at the queue
//     every tick (CommunicatorConfig::hand_off_tick) for a while (kLinger) and takes an
//     operation left there over a tick;
//   - the caller waited later (it computed meanwhile), the progress thread had to take it, or
//     more were queued first: the next one wakes the progress thread at once, as every
//     operation did before, so that it overlaps the caller's compute.
// Waking the progress thread races with the caller's wait(), and the woken thread often wins:
// the caller then pays a wake-up to learn the operation is done, and the transport a change of
// owner each way (an io_uring ring is replaced). Ticks instead of a short timer: arming a timer due
// within about a millisecond is costly on virtual machines (figures: docs/performance.md). Work queued behind other work gets no hand-off and streams on the
// progress thread.
//
// Failure (see failure_board.h): the first failed operation ends the communicator. The rank
// that found the failure writes it to the store, then closes every connection, so peers
// blocked on it fail at once and name the real reason; every later operation fails fast with
// the original Status. abort() does the same on request, from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "braid/store.h"
#include "braid/work.h"
#include "collectives/collective.h"
#include "common/env.h"
#include "common/function_ref.h"
#include "common/thread_annotations.h"
#include "runtime/communicator_config.h"
#include "runtime/device/device_staging.h"
#include "runtime/engine/op_label.h"
#include "runtime/engine/run_cache.h"
#include "runtime/failure/failure_board.h"
#include "runtime/links/peer_links.h"
#include "runtime/work_state.h"
#include "transport/transport.h"

namespace braid {

class OpRun;

class CommunicatorImpl {
 public:
  // Starts the progress thread and builds every connection; returns once all are up.
  static Result<std::unique_ptr<CommunicatorImpl>> create(CommunicatorConfig config);
  ~CommunicatorImpl();
  CommunicatorImpl(const CommunicatorImpl&) = delete;
  CommunicatorImpl& operator=(const CommunicatorImpl&) = delete;

  int rank() const { return cfg_.rank; }
  int size() const { return cfg_.size; }
  int local_rank() const { return cfg_.local_rank; }
  int local_size() const { return cfg_.local_size; }
  const std::shared_ptr<Store>& store() const { return cfg_.store; }
  std::string last_algorithm() const;
  // Communicator::peer_transports(): set before create() returns, constant after.
  const std::vector<std::string>& peer_transports() const { return peer_transports_; }
  // The links, once create() returned: which transport carries each peer (transport_name), the
  // ring order. Null after the progress thread ended.
  const PeerLinks* links() const { return links_.get(); }

  // Validates `args` (throwing braid::Error before anything is sent) and queues it.
  Work enqueue(collectives::CollectiveArgs args);
  // The blocking form: enqueue + wait, except that with nothing queued or running the operation
  // runs right here. Throws the operation's error.
  void run(collectives::CollectiveArgs args);
  // Work::wait(): when `work` is the only operation queued and none is running, runs it on the
  // calling thread. Returns at once otherwise (the progress thread has it). `waited_ns`: when the
  // wait began (WorkState::note_wait), 0 if it did not read the clock.
  void help(const detail::WorkState& work, int64_t waited_ns = 0);

  // For tests and TRACE: operations (a group counts once) run so far on a caller's thread
  // (blocking calls, wait()) and on the progress thread.
  struct HandOffCounts {
    uint64_t on_caller = 0;
    uint64_t on_progress_thread = 0;
  };
  HandOffCounts hand_off_counts() const {
    return {ran_on_caller_.load(std::memory_order_relaxed), ran_on_progress_.load(std::memory_order_relaxed)};
  }

  // The CUDA stream that operations on device buffers are ordered on (device_staging.h).
  void set_stream(void* stream) { stream_.store(stream, std::memory_order_relaxed); }
  void* stream() const { return stream_.load(std::memory_order_relaxed); }

  CommState state() const { return state_.load(std::memory_order_acquire); }
  Status failure() const;
  void abort(const std::string& reason);
  // group.cc: operations enqueued in between run as one unit.
  void group_start();
  Work group_end();
  // Collective over this communicator; nullptr for color kNoColor (bootstrap/split.h).
  Result<std::unique_ptr<CommunicatorImpl>> split(int color, int key);

 private:
  explicit CommunicatorImpl(CommunicatorConfig config);

  struct Pending {
    collectives::CollectiveArgs args;
    std::shared_ptr<detail::WorkState> work;
    uint64_t seq = 0;
    uint64_t match_seq = 0;  // see op_header.h
    std::vector<Pending> group;  // group_start() ... group_end(): the members (this one has no args)
    std::unique_ptr<DeviceStaging> device;  // set when a buffer is on a GPU (args point at pinned copies)
  };

  // When `args` touches device memory: stages it (args then point at pinned buffers) and holds
  // the stream until `work` completes. Throws braid::Error, naming the operation, on failure.
  std::unique_ptr<DeviceStaging> stage_device(collectives::CollectiveArgs& args,
                                              const std::shared_ptr<detail::WorkState>& work);
  // How an operation that ran without error ends: its result copied back to the GPU, if any.
  static Status finish_device(Pending& op, const Deadline& deadline, const OpLabel& what);
  // A pipelined staging (device_chunks.cc): queues its chunks as operations, in order, and
  // returns the Work that ends when all did. Throws nothing: a failure completes `work`.
  Work enqueue_chunks(std::unique_ptr<DeviceStaging> staged, const std::shared_ptr<detail::WorkState>& work);
  // The pinned slots device buffers are staged through (staging_pipeline.h), made at first use.
  std::once_flag staging_once_;
  std::shared_ptr<StagingPool> staging_pool_;

  void progress_main();
  // The progress thread's wait for something to do, under mu_ (`lock`). Returns once it may take
  // busy_ (an operation whose grace is over, stopping, an abort) or at `board_at` (idle_check).
  void wait_for_work(std::unique_lock<std::mutex>& lock, Clock::time_point board_at) REQUIRES(mu_);
  // After pushing `work`'s operation to queue_, under mu_: the hand-off (see the top) when the
  // communicator was idle before. Returns whether the progress thread must be woken.
  bool queued_locked(bool idle_before, const std::shared_ptr<detail::WorkState>& work) REQUIRES(mu_);
  // Queues (or, for an open group, holds) a new operation; under mu_. Returns false (and
  // completes `work` with the reason) when the communicator can no longer run it.
  bool admit_locked(collectives::CollectiveArgs&& args, const std::shared_ptr<detail::WorkState>& work,
                    Pending* out) REQUIRES(mu_);
  // Runs `op` on the calling thread, which set busy_, then clears busy_.
  void run_here(Pending& op);
  // Completes `work`, which this thread has just finished, with `s`. On the progress thread,
  // for the operation it took last (hold_last_), the completion waits until busy_ is released
  // (complete_held): a caller that waits at once issues its next operation as soon as it sees
  // this one done, and would otherwise find the communicator still busy and queue it, and so
  // every later one, behind the progress thread (a wake-up each way per operation). Operations
  // still complete in the order they ran: a completion on another thread first completes
  // what is held.
  void complete_last(const std::shared_ptr<detail::WorkState>& work, Status s);
  void complete_held();
  // Clears busy_ (and wakes the progress thread when it has work); *dequeued, when given, gets
  // how many queued operations have left the queue so far.
  void release_busy(uint64_t* dequeued = nullptr);
  // Wakes the progress thread for an operation just queued (queued_locked said to).
  void wake_progress();
  Status connect_all();
  // Runs `op` (which stays the caller's). may_stream: operations queued behind it may be taken
  // and overlapped with it (not inside a group, whose members must run as the group says).
  void run_one(Pending& op, bool may_stream = true);
  void run_stream(Pending& first, bool may_stream);
  void run_group(Pending& group);
  // Drives `runs` together; runs[i] starts once runs[after[i]] is done (after[i] < i), or at
  // once when after[i] is -1 (group calls: messages to one peer keep their order). `between`,
  // called before each pass, may append to runs and after, and change `what` and `deadline`
  // (run_stream: they follow the oldest unfinished operation).
  Status drive(const std::vector<OpRun*>& runs, const std::vector<int>& after, const OpLabel& what,
               const Deadline& deadline, std::optional<Failure>* adopted, FunctionRef<void()> between = {});
  // At most this many operations in one run_stream() (the completions of all of them are
  // matched against each run), after which the stream drains and the loop takes the next.
  static constexpr size_t kMaxStream = 16;
  Status on_failure(Status s, const std::string& what, uint64_t seq, const std::vector<OpRun*>& runs,
                    std::optional<Failure> adopted);
  TimeoutReport timeout_report(uint64_t seq, const std::string& what);
  std::string store_trouble() const;
  std::vector<std::pair<int, uint64_t>> retransmits() const;
  int own_culprit(const Status& s, std::string* why) const;
  void blame_store_server(int* culprit, std::string* why) const;
  std::string blame(const std::string& what, int culprit, const std::string& why) const;
  std::string progress_text(uint64_t seq, const std::string& what, const std::string& waiting) const;
  void idle_check();
  void handle_abort();
  void close_connections(const std::vector<OpRun*>& runs);
  void end(CommState state, Status s);
  Status fail_fast_status(const std::string& what) const;
  void wake_transport();
  void finish_job_store();

  CommunicatorConfig cfg_;
  collectives::Algo forced_algo_ = collectives::Algo::automatic;
  // Plan::ring_depth for every collective: collectives::choose_ring_depth (BRAID_RING_DEPTH,
  // else 1 when every connection of the job is host-local, PeerLinks::all_host_local, else
  // enough segments for kNetworkHopBytes per hop). Set by connect_all from what every rank sees
  // alike.
  size_t ring_depth_ = 1;
  std::string ring_depth_why_;
  FailureBoard board_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_ GUARDED_BY(mu_);
  bool busy_ GUARDED_BY(mu_) = false;  // a thread runs an operation or touches the transport (see the top)
  // The hand-off (the top), under mu_. idle_work_ identifies (never dereferenced) the last
  // operation queued on an idle communicator; callers_wait_ is the prediction.
  const detail::WorkState* idle_work_ GUARDED_BY(mu_) = nullptr;
  bool callers_wait_ GUARDED_BY(mu_) = true;
  // When that operation went back to its caller and when the caller first waited for it
  // (WorkState::wait_times); null once a wait before completion (help) has settled it.
  std::shared_ptr<detail::WorkState::WaitTimes> idle_times_ GUARDED_BY(mu_);
  Clock::time_point grace_until_ GUARDED_BY(mu_){};   // the only queued operation is left to its caller until then
  Clock::time_point linger_until_ GUARDED_BY(mu_){};  // until then the idle progress thread ticks
  // When the progress thread's wait ends by itself; time_point::min() while it is not waiting
  // (it looks at the queue before it waits again).
  Clock::time_point progress_wakes_at_ GUARDED_BY(mu_) = Clock::time_point::min();
  std::vector<std::string> peer_transports_;  // by rank: what the connection to it runs on
  // complete_last(): set by the progress thread around the operation it took; what it held.
  // held_mu_ keeps completions in order: a caller that takes the communicator as soon as busy_
  // is released completes what the progress thread still holds before its own operation.
  bool hold_last_ = false;
  std::mutex held_mu_;
  std::vector<std::pair<std::shared_ptr<detail::WorkState>, Status>> held_ GUARDED_BY(held_mu_);
  std::atomic<uint64_t> ran_on_caller_{0};
  std::atomic<uint64_t> ran_on_progress_{0};
  bool stopping_ GUARDED_BY(mu_) = false;
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  uint64_t collective_seq_ = 0;
  std::set<int> algo_logged_;           // (kind, algo, log2 size) already shown at INFO
  std::vector<uint64_t> p2p_send_seq_;  // per peer: sends to it
  std::vector<uint64_t> p2p_recv_seq_;  // per peer: receives from it
  std::atomic<uint64_t> enqueued_{0};  // lets the progress thread spin on new work without the lock
  uint64_t split_count_ = 0;           // caller's thread: splits are collective calls
  int group_depth_ GUARDED_BY(mu_) = 0;  // open group_start() calls
  std::vector<Pending> group_ops_ GUARDED_BY(mu_);  // what the open group holds

  std::atomic<CommState> state_{CommState::ok};
  std::atomic<bool> abort_requested_{false};
  mutable std::mutex state_mu_;
  Status failure_ GUARDED_BY(state_mu_);  // the reason state_ is not ok
  std::string abort_reason_ GUARDED_BY(state_mu_);
  std::condition_variable state_cv_;

  // The transports, one connection per peer and the poll loop (peer_links.h). Touched only by
  // the thread that holds busy_ (after setup).
  std::unique_ptr<PeerLinks> links_;
  std::mutex links_mu_;  // guards links_'s lifetime against wake() from other threads
  // drive()'s and run_stream()'s working lists, kept for the same reason. Neither function is
  // re-entered, and only the thread holding busy_ runs them.
  std::vector<bool> drive_started_;
  std::vector<OpRun*> stream_runs_;
  std::vector<int> stream_after_;
  // The run of `op`: a kept one of its shape (when `shape` is set) run again, else one prepared.
  // `run` is null when the operation has nothing to move; name and algo say what it is either way.
  struct MadeRun {
    std::unique_ptr<OpRun> run;
    bool reused = false;
    std::string name;
    collectives::Algo algo = collectives::Algo::automatic;
  };
  Result<MadeRun> make_run(const Pending& op, const collectives::RunOptions& options,
                           const std::optional<RunShape>& shape);
  RunCache run_cache_;  // engine/run_cache.h; touched only by the thread holding busy_
  // run_stream()'s operations, kept like the working lists above.
  struct StreamOp {  // one of run_stream()'s operations
    Pending& op;                     // run_stream's `first` (the caller's), or *taken
    std::unique_ptr<Pending> taken;  // an operation taken from the queue
    OpLabel what;
    std::unique_ptr<OpRun> run;
    Deadline deadline;
    std::chrono::steady_clock::time_point started;
    std::optional<RunShape> shape;  // kept for reuse when it finishes, if set
    bool completed = false;
  };
  std::vector<StreamOp> stream_ops_;
  // run_group()'s send/recv runs, reused across calls (each call empties them on every way out).
  struct GroupRun {
    std::unique_ptr<OpRun> run;
    std::optional<RunShape> shape;  // kept for reuse when it finishes, if set
    Pending* member;
  };
  std::vector<GroupRun> group_runs_;
  std::vector<OpRun*> group_run_ptrs_;
  std::vector<int> group_after_;
  int failed_peer_ = -1;     // the peer whose connection failed first (drive), for failure reports
  uint64_t done_seq_ = 0;    // the last operation completed, for timeout reports
  OpLabel done_what_;

  std::atomic<int> last_algo_{0};
  std::atomic<void*> stream_{nullptr};
  std::mutex setup_mu_;
  std::condition_variable setup_cv_;
  bool setup_done_ GUARDED_BY(setup_mu_) = false;
  Status setup_status_ GUARDED_BY(setup_mu_);
  std::thread thread_;
};

}  // namespace braid
