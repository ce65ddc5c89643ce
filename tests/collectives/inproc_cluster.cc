#include "tests/collectives/inproc_cluster.h"

#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "collectives/runner.h"

namespace braid::collectives::testing {

InprocCluster::InprocCluster(int size) : size_(size) {
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::vector<std::string> addresses;
  std::vector<std::vector<std::unique_ptr<transport::Connection>>> owned(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    transports.push_back(transport::inproc::create_inproc_transport(fabric_));
    auto addr = transports.back()->listen();
    if (!addr.is_ok()) throw std::runtime_error(addr.status().message());
    addresses.push_back(addr.value());
    owned[static_cast<size_t>(r)].resize(static_cast<size_t>(size));
  }
  // inproc's connect only queues the link for the acceptor, so one thread can make both ends.
  const Deadline deadline = Deadline::after_seconds(10);
  for (int i = 0; i < size; ++i) {
    for (int j = i + 1; j < size; ++j) {
      auto c = transports[static_cast<size_t>(i)]->connect(addresses[static_cast<size_t>(j)],
                                                           transport::PeerIdentity{7, i, j}, deadline);
      if (!c.is_ok()) throw std::runtime_error(c.status().message());
      auto a = transports[static_cast<size_t>(j)]->accept(transport::PeerIdentity{7, j, i}, deadline);
      if (!a.is_ok()) throw std::runtime_error(a.status().message());
      owned[static_cast<size_t>(i)][static_cast<size_t>(j)] = std::move(c).value();
      owned[static_cast<size_t>(j)][static_cast<size_t>(i)] = std::move(a).value();
    }
  }
  for (int r = 0; r < size; ++r) {
    std::vector<std::unique_ptr<transport::Transport>> mine;
    mine.push_back(std::move(transports[static_cast<size_t>(r)]));
    links_.push_back(std::make_unique<PeerLinks>(r, std::move(mine), std::move(owned[static_cast<size_t>(r)]),
                                                 std::vector<size_t>(static_cast<size_t>(size), 0)));
  }
}

InprocCluster::~InprocCluster() { links_.clear(); }

namespace {
std::map<int, std::unique_ptr<InprocCluster>>& shared_clusters() {
  static std::map<int, std::unique_ptr<InprocCluster>> all;
  return all;
}
}  // namespace

InprocCluster& InprocCluster::shared(int size) {
  auto& c = shared_clusters()[size];
  if (!c) c = std::make_unique<InprocCluster>(size);
  return *c;
}

void InprocCluster::drop_shared(int size) { shared_clusters().erase(size); }

std::vector<Status> InprocCluster::run(const std::function<Status(int rank)>& fn) {
  std::vector<Status> out(static_cast<size_t>(size_));
  std::vector<std::thread> threads;
  for (int r = 0; r < size_; ++r) {
    threads.emplace_back([&, r] { out[static_cast<size_t>(r)] = fn(r); });
  }
  for (auto& t : threads) t.join();
  return out;
}

Status run_collective(const CollectiveArgs& args, int rank, int size, PeerLinks& links, const RunOptions& options,
                      Algo* algo_used) {
  ASSIGN_OR_RETURN(PreparedCollective prepared,
                   prepare_collective(args, rank, size, links.capabilities(), links.peers(), options));
  if (algo_used != nullptr) *algo_used = prepared.algo;
  if (prepared.executor == nullptr) return Status::ok();
  Executor& ex = *prepared.executor;
  const std::string where = prepared.name + " on rank " + std::to_string(rank) + ": ";
  auto done = [&] { return ex.done(); };
  auto advance = [&] { return ex.progress(); };
  auto take = [&](const transport::Completion& c, bool* ours) { return ex.on_completion(c, ours); };
  auto check = [&](Clock::time_point now) -> Status {
    if (now < options.deadline.at()) return Status::ok();
    return timeout_error(where + "did not finish before its deadline (op id " + std::to_string(options.op_id) +
                         "); still waiting for " + ex.waiting_for() +
                         ". A peer may be stuck, dead or calling a different collective; BRAID_TIMEOUT_S sets the bound.");
  };
  auto poll_failed = [&](Status s) { return s.with_context(where); };
  LinkWorkFns work{done, advance, take, check, {}, poll_failed};
  Status st = links.drive(work, options.deadline);
  if (!st.is_ok() && ex.outstanding() > 0) {
    // Their message order is lost: close the connections that hold our operations, and wait
    // (bounded) until the transport handed those back, so the buffers may be freed.
    for (int peer : ex.busy_peers()) links.close(peer);
    links.drain([&] { return ex.outstanding(); }, [&](const transport::Completion& c) { (void)ex.on_completion(c); },
                std::chrono::seconds(2));
  }
  return st;
}

}  // namespace braid::collectives::testing
