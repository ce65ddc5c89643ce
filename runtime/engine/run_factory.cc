#include "runtime/engine/run_factory.h"

#include "collectives/algorithms.h"
#include "collectives/selection.h"
#include "common/log.h"
#include "runtime/engine/op_label.h"

namespace braid {

collectives::RunOptions RunFactory::options(collectives::Algo algo) const {
  collectives::RunOptions options;
  options.algo = algo;
  options.chunk_bytes = cfg_.env.chunk_bytes;
  options.ring_depth = links_.ring_depth();
  options.deadline = deadline();
  return options;  // order: set by make() for a run it prepares, the only one that reads it
}

collectives::RunOptions RunFactory::stream_options(const PendingOp& op) const {
  collectives::RunOptions o = options(stream_algo(op.args.kind));
  o.op_id = op.seq & 0x7fffffffu;  // executor cookies keep bit 63 clear (op_run.h)
  return o;
}

collectives::RunOptions RunFactory::group_options() const { return options(forced_algo_); }

Result<RunFactory::MadeRun> RunFactory::make(const PendingOp& op, const collectives::RunOptions& options,
                                             const std::optional<RunShape>& shape) {
  if (std::unique_ptr<OpRun> run = shape ? cache_.take(*shape) : nullptr) {
    RETURN_IF_ERROR(run->reuse(op.args, cfg_.comm_id, op.seq, op.match_seq, options.op_id));
    MadeRun m{nullptr, true, run->name(), run->algo()};
    m.run = std::move(run);
    return m;
  }
  collectives::RunOptions full = options;
  full.order = links_->ring_order();
  ASSIGN_OR_RETURN(collectives::PreparedCollective prepared,
                   collectives::prepare_collective(op.args, cfg_.rank, cfg_.size, links_->capabilities(),
                                                   links_->peers(), full));
  log_choice(op, prepared);
  MadeRun m{nullptr, false, prepared.name, prepared.algo};
  if (prepared.executor != nullptr) {
    m.run = std::make_unique<OpRun>(std::move(prepared), op.args, cfg_.rank, cfg_.comm_id, op.seq, op.match_seq,
                                    links_->peers());
  }
  return m;
}

// INFO says which algorithm each collective uses, once per (collective, algorithm, size class)
// rather than per call, so a training loop's log stays readable.
void RunFactory::log_choice(const PendingOp& op, const collectives::PreparedCollective& prepared) {
  if (!log_enabled(LogLevel::info) || prepared.executor == nullptr) return;
  size_t bytes = op.args.count * dtype_size(op.args.dtype);
  int size_class = 0;
  while (bytes > 1 && size_class < 63) bytes >>= 1, ++size_class;
  if (algo_logged_.insert((static_cast<int>(op.args.kind) << 16) | (static_cast<int>(prepared.algo) << 8) | size_class).second) {
    BRAID_LOG(info) << OpLabel::one(op.args.kind, op.seq).str() << ": " << prepared.name << " for " << op.args.count
                    << " x " << to_string(op.args.dtype) << " (" << op.args.count * dtype_size(op.args.dtype)
                    << " bytes)";
  }
}

std::string RunFactory::last_algorithm() const {
  return collectives::to_string(static_cast<collectives::Algo>(last_algo_.load(std::memory_order_relaxed)));
}

}  // namespace braid
