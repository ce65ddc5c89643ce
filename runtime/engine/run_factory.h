// runtime/engine/run_factory.h - where an operation's run comes from: the one place its
// RunOptions are filled, a kept run of its shape run again (run_cache.h), else one prepared.
//
// Threading: only the thread that holds the engine (op_queue.h), except last_algorithm().
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "collectives/algorithms.h"
#include "collectives/runner.h"
#include "common/status.h"
#include "runtime/communicator_config.h"
#include "runtime/engine/op_run.h"
#include "runtime/engine/pending_op.h"
#include "runtime/engine/run_cache.h"
#include "runtime/links/comm_links.h"

namespace braid {

class RunFactory {
 public:
  // Both outlive this.
  RunFactory(const CommunicatorConfig& cfg, const CommLinks& links) : cfg_(cfg), links_(links) {}

  // BRAID_ALGO, parsed once when the communicator is made.
  void set_forced_algo(collectives::Algo algo) { forced_algo_ = algo; }
  // A stream's operation: BRAID_ALGO is a preference for the whole job, so collectives that
  // have no such algorithm (all_to_all has only pairwise) keep the automatic choice instead of
  // failing. Both leave `order` null: make() sets it for a run it prepares anew.
  collectives::RunOptions stream_options(const PendingOp& op) const;
  // What a kept run needs of stream_options() (StreamRunner::run_kept): the algorithm
  // preference its shape is keyed by, and the operation's deadline. Without the rest of the
  // options (the ring depth, the chunk size), which only a run prepared anew reads.
  collectives::Algo stream_algo(collectives::Kind kind) const {
    if (forced_algo_ == collectives::Algo::automatic) return forced_algo_;  // no BRAID_ALGO: the common case
    return collectives::supports(kind, forced_algo_) ? forced_algo_ : collectives::Algo::automatic;
  }
  // BRAID_TIMEOUT_S is seconds: a coarse clock read will do, at a fraction of an exact one's cost.
  Deadline deadline() const { return Deadline::coarse_after_seconds(cfg_.env.timeout_s); }
  // A group's sends and receives: BRAID_ALGO as it is; op_id is set per member.
  collectives::RunOptions group_options() const;
  collectives::Algo group_algo() const { return forced_algo_; }  // group_options().algo

  // The run of `op`: a kept one of its shape (when `shape` is set) run again, else one prepared.
  // `run` is null when the operation has nothing to move; name and algo say what it is either way.
  struct MadeRun {
    std::unique_ptr<OpRun> run;
    bool reused = false;
    std::string name;
    collectives::Algo algo = collectives::Algo::automatic;
  };
  Result<MadeRun> make(const PendingOp& op, const collectives::RunOptions& options,
                       const std::optional<RunShape>& shape);
  RunCache& cache() { return cache_; }

  void note_algo(collectives::Algo algo) { last_algo_.store(static_cast<int>(algo), std::memory_order_relaxed); }
  // The algorithm of the last operation started (Communicator::last_algorithm). Any thread.
  std::string last_algorithm() const;

 private:
  collectives::RunOptions options(collectives::Algo algo) const;
  void log_choice(const PendingOp& op, const collectives::PreparedCollective& prepared);

  const CommunicatorConfig& cfg_;
  const CommLinks& links_;
  collectives::Algo forced_algo_ = collectives::Algo::automatic;
  RunCache cache_;
  std::set<int> algo_logged_;  // (kind, algo, log2 size) already shown at INFO
  std::atomic<int> last_algo_{0};
};

}  // namespace braid
