#include "runtime/communicator_impl.h"

#include <vector>
#include <utility>

#include "collectives/algorithms.h"
#include "collectives/validate.h"
#include "common/spin.h"
#include "runtime/bootstrap/split.h"

namespace braid {

CommunicatorImpl::CommunicatorImpl(CommunicatorConfig config)
    : cfg_(std::move(config)),
      failure_(cfg_, links_),
      device_(cfg_),
      queue_(cfg_, failure_, &runner_),
      held_(cfg_.before_held_complete),
      runs_(cfg_, links_),
      stream_(cfg_, queue_, held_, failure_, runs_, links_),
      group_(cfg_, stream_, held_, failure_, runs_, links_),
      runner_(queue_, stream_, group_),
      progress_(cfg_, queue_, runner_, held_, failure_, links_, runs_) {}

Result<std::unique_ptr<CommunicatorImpl>> make_communicator_impl(CommunicatorConfig config) {
  set_ranks_on_node(config.local_size);
  std::unique_ptr<CommunicatorImpl> impl(new CommunicatorImpl(std::move(config)));
  ASSIGN_OR_RETURN(collectives::Algo algo, collectives::parse_algo(impl->cfg_.env.algo));
  impl->runs_.set_forced_algo(algo);
  RETURN_IF_ERROR(impl->progress_.start());
  return impl;
}

CommunicatorImpl::~CommunicatorImpl() {
  queue_.stop();
  progress_.join();
  failure_.leave_store();
}

std::unique_ptr<DeviceStaging> CommunicatorImpl::stage_device(collectives::CollectiveArgs& args,
                                                              const std::shared_ptr<detail::WorkState>& work) {
  return device_.stage(args, work, [this] { return queue_.group_open(); });
}

Work CommunicatorImpl::enqueue(collectives::CollectiveArgs args) {
  if (!collectives::plainly_valid(args, cfg_.rank, cfg_.size)) {
    raise_if_error(collectives::validate_collective_in_full(args, cfg_.rank, cfg_.size));
  }
  auto work = detail::make_work_state();
  std::unique_ptr<DeviceStaging> device = stage_device(args, work);
  if (device && device->pipelined()) return queue_.push_chunks(*device, work);
  return queue_.push(std::move(args), std::move(work), std::move(device));
}

void CommunicatorImpl::run(collectives::CollectiveArgs args) {
  if (!collectives::plainly_valid(args, cfg_.rank, cfg_.size)) {
    raise_if_error(collectives::validate_collective_in_full(args, cfg_.rank, cfg_.size));
  }
  auto work = detail::make_work_state();
  std::unique_ptr<DeviceStaging> device = stage_device(args, work);
  if (device && device->pipelined()) {
    Work chunked = queue_.push_chunks(*device, work);
    device.reset();  // the chunks hold what they need; the whole's staging goes before the wait
    return chunked.wait();
  }
  PendingOp op;
  if (queue_.push_or_take(std::move(args), work, std::move(device), &op)) runner_.run_here(op);
  Work(work).wait();  // done already when it ran here; raises its error
}

void CommunicatorImpl::abort(const std::string& reason) {
  failure_.request_abort(reason);
  std::vector<PendingOp> queued = queue_.cancel_all();
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
  queue_.wake_all();
  links_.wake();
  failure_.wait_until_ended();
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
  return make_communicator_impl(split_config(cfg_, n, color, all));
}

}  // namespace braid
