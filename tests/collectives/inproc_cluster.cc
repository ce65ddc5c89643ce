#include "tests/collectives/inproc_cluster.h"

#include <map>
#include <stdexcept>
#include <string>
#include <thread>

namespace braid::collectives::testing {

InprocCluster::InprocCluster(int size) : size_(size), peers_(static_cast<size_t>(size)) {
  std::vector<std::string> addresses;
  for (int r = 0; r < size; ++r) {
    transports_.push_back(transport::inproc::create_inproc_transport(fabric_));
    auto addr = transports_.back()->listen();
    if (!addr.is_ok()) throw std::runtime_error(addr.status().message());
    addresses.push_back(addr.value());
    peers_[static_cast<size_t>(r)].assign(static_cast<size_t>(size), nullptr);
  }
  // inproc's connect only queues the link for the acceptor, so one thread can make both ends.
  const Deadline deadline = Deadline::after_seconds(10);
  for (int i = 0; i < size; ++i) {
    for (int j = i + 1; j < size; ++j) {
      auto c = transports_[static_cast<size_t>(i)]->connect(addresses[static_cast<size_t>(j)],
                                                            transport::PeerIdentity{7, i, j}, deadline);
      if (!c.is_ok()) throw std::runtime_error(c.status().message());
      auto a = transports_[static_cast<size_t>(j)]->accept(transport::PeerIdentity{7, j, i}, deadline);
      if (!a.is_ok()) throw std::runtime_error(a.status().message());
      peers_[static_cast<size_t>(i)][static_cast<size_t>(j)] = c.value().get();
      peers_[static_cast<size_t>(j)][static_cast<size_t>(i)] = a.value().get();
      owned_.push_back(std::move(c.value()));
      owned_.push_back(std::move(a.value()));
    }
  }
}

InprocCluster::~InprocCluster() {
  owned_.clear();
  transports_.clear();
}

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

}  // namespace braid::collectives::testing
