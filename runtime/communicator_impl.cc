#include "runtime/communicator_impl.h"

#include "common/log.h"
#include "collectives/algorithms.h"
#include "collectives/validate.h"
#include "transport/registry.h"

namespace braid {

CommunicatorImpl::CommunicatorImpl(CommunicatorConfig config) : cfg_(std::move(config)) {}

Result<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::create(CommunicatorConfig config) {
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

// Builds one connection to every other rank. Lower ranks connect to higher ones and accept
// from lower ones, in rank order; connect() does not wait for the acceptor, so this order
// cannot deadlock.
Status CommunicatorImpl::connect_all() {
  const int rank = cfg_.rank, size = cfg_.size;
  transport::TransportOptions options;
  options.env = cfg_.env;
  options.master_addr = cfg_.master_addr;
  options.inproc_fabric = cfg_.inproc_fabric;
  ASSIGN_OR_RETURN(transport_, transport::create_transport(cfg_.env.transport, options));
  connections_.resize(size);
  peers_.assign(size, nullptr);
  if (size == 1) return Status::ok();

  ASSIGN_OR_RETURN(std::string address, transport_->listen());
  Deadline deadline = Deadline::after_seconds(cfg_.env.rendezvous_timeout_s);
  std::vector<std::string> addresses(size);
  try {
    cfg_.store->set("addr/" + std::to_string(rank), address);
    for (int r = 0; r < size; ++r) {
      if (r != rank) addresses[r] = cfg_.store->get("addr/" + std::to_string(r));
    }
  } catch (const Error& e) {
    return Status(e.code(), std::string("exchanging transport addresses: ") + e.what());
  }
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    transport::PeerIdentity who{cfg_.comm_id, rank, r};
    if (r > rank) {
      ASSIGN_OR_RETURN(connections_[r], transport_->connect(addresses[r], who, deadline));
    } else {
      ASSIGN_OR_RETURN(connections_[r], transport_->accept(who, deadline));
    }
    peers_[r] = connections_[r].get();
  }
  return Status::ok();
}

void CommunicatorImpl::progress_main() {
  Status s = connect_all();
  if (s.is_ok()) {
    BRAID_LOG(info) << "communicator ready: rank " << cfg_.rank << " of " << cfg_.size << ", transport "
                    << transport_->name() << ", algorithm " << cfg_.env.algo;
  }
  {
    std::lock_guard<std::mutex> lock(setup_mu_);
    setup_status_ = s;
    setup_done_ = true;
  }
  setup_cv_.notify_all();
  if (!s.is_ok()) return;

  uint64_t taken = 0;
  for (;;) {
    // A wake-up through the condition variable costs ~40 us here; back-to-back operations
    // (the common case in a training step or a benchmark) arrive within a short spin instead.
    auto spin_end = Clock::now() + std::chrono::microseconds(cfg_.env.spin_us);
    while (enqueued_.load(std::memory_order_acquire) == taken && Clock::now() < spin_end) std::this_thread::yield();
    Pending op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping, and everything queued has run
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    ++taken;
    run_one(op);
  }
  connections_.clear();
  transport_.reset();
}

void CommunicatorImpl::run_one(Pending& op) {
  const std::string what = std::string(collectives::to_string(op.args.kind)) + " #" + std::to_string(op.seq);
  if (!failed_.is_ok()) {
    op.work->complete(Status(failed_.code(), what + " on rank " + std::to_string(cfg_.rank) +
                                                 " not run: the communicator failed earlier: " + failed_.message()));
    return;
  }
  collectives::RunOptions options;
  // BRAID_ALGO is a preference for the whole job: collectives that have no such algorithm
  // (all_to_all has only pairwise) keep the automatic choice instead of failing.
  options.algo = collectives::supports(op.args.kind, forced_algo_) ? forced_algo_ : collectives::Algo::automatic;
  options.chunk_bytes = cfg_.env.chunk_bytes;
  options.deadline = Deadline::after_seconds(cfg_.env.timeout_s);
  options.op_id = op.seq;
  collectives::Algo used = collectives::Algo::automatic;
  BRAID_LOG(trace) << what << " count " << op.args.count << " " << to_string(op.args.dtype) << " starts";
  Status s = collectives::run_collective(op.args, cfg_.rank, cfg_.size, *transport_, peers_, options, &used);
  last_algo_.store(static_cast<int>(used), std::memory_order_relaxed);
  if (!s.is_ok()) {
    s = s.with_context(what + ": ");
    failed_ = s;
  }
  op.work->complete(std::move(s));
}

std::string CommunicatorImpl::last_algorithm() const {
  return collectives::to_string(static_cast<collectives::Algo>(last_algo_.load(std::memory_order_relaxed)));
}

Work CommunicatorImpl::enqueue(collectives::CollectiveArgs args) {
  raise_if_error(collectives::validate_collective(args, cfg_.rank, cfg_.size));
  auto work = std::make_shared<detail::WorkState>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Pending{std::move(args), work, ++next_seq_});
    enqueued_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_one();
  return Work(work);
}

// A rank that finishes early may leave; only the rank serving the store must stay until
// every rank is done with it (bounded), or the late ones would lose their store.
void CommunicatorImpl::finish_job_store() {
  if (!cfg_.store) return;
  try {
    cfg_.store->add("finished", 1);
    if (cfg_.server) {
      Deadline deadline = Deadline::after_seconds(std::min(cfg_.env.rendezvous_timeout_s, 60.0));
      while (cfg_.store->add("finished", 0) < cfg_.size && !deadline.expired()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  } catch (const Error& e) {
    BRAID_LOG(warn) << "rank " << cfg_.rank << " leaving: the store is gone (" << e.what() << ")";
  }
}

}  // namespace braid
