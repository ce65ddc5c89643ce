// The job's lease on a store served in a rank's process (job_lease.h).
#include "runtime/bootstrap/job_lease.h"

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "braid/error.h"
#include "common/deadline.h"
#include "common/log.h"

namespace braid {

JobLease::JobLease(std::shared_ptr<Store> ns, int job_rank, int job_size, std::shared_ptr<TcpStoreServer> server,
                   double bound_s)
    : ns_(std::move(ns)), job_rank_(job_rank), job_size_(job_size), server_(std::move(server)), bound_s_(bound_s) {}

void JobLease::let_go(int job_rank) {
  try {
    ns_->set(key(job_rank), "left out");
  } catch (const Error& e) {
    BRAID_LOG(warn) << "rank " << job_rank_ << ": could not mark rank " << job_rank << " done in the store (" << e.what() << ")";
  }
}

JobLease::~JobLease() {
  if (store_gone_.load()) return;
  try {
    ns_->set(key(job_rank_), "done");
    if (!server_) return;
    std::vector<std::string> all;
    for (int r = 0; r < job_size_; ++r) all.push_back(key(r));
    Deadline deadline = Deadline::after_seconds(unsettled_.load() ? 3.0 : bound_s_);
    while (!ns_->check(all) && !deadline.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } catch (const Error& e) {
    BRAID_LOG(warn) << "rank " << job_rank_ << " leaving: the store is gone (" << e.what() << ")";
  }
}

}  // namespace braid
