// runtime/bootstrap/job_lease.h - how long the store a rank serves in its own process stays up.
//
// Without a launcher rank 0 serves the job's store, and every communicator of the job meets
// through it: the job's own, its split() children (other colors' too, which rank 0 is not in)
// and what shrink() makes. So the store must outlive every communicator of every rank, not only
// rank 0's. The rule: each rank holds one lease, shared by all its communicators (children get
// their parent's); the lease ends with the rank's last communicator and marks the rank done in
// the job's namespace ("lease/<job rank>"). Rank 0's lease owns the server: when it ends it
// waits, bounded, until every rank of the job is done, then the server stops. Ranks that
// shrink() left out are marked done by the survivors (they may be dead). After a failure that
// no shrink settled, the wait is short: some ranks may never come.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "braid/store.h"

namespace braid {

class JobLease {
 public:
  // `ns`: the job communicator's namespace; `server`: when this rank serves the store (else null);
  // `bound_s`: the longest wait for the others when nothing failed.
  JobLease(std::shared_ptr<Store> ns, int job_rank, int job_size, std::shared_ptr<TcpStoreServer> server,
           double bound_s);
  ~JobLease();  // marks this rank done; the serving rank then waits for the others (bounded)
  JobLease(const JobLease&) = delete;
  JobLease& operator=(const JobLease&) = delete;

  // shrink() left `job_rank` out: nobody waits for it any more.
  void let_go(int job_rank);
  // A communicator of this rank failed (the wait becomes short), or a shrink settled it.
  void failure_seen() { unsettled_.store(true); }
  void settled() { unsettled_.store(false); }
  // The store cannot be reached: this rank's lease ends without a word to it.
  void store_gone() { store_gone_.store(true); }

 private:
  static std::string key(int job_rank) { return "lease/" + std::to_string(job_rank); }

  std::shared_ptr<Store> ns_;
  int job_rank_;
  int job_size_;
  std::shared_ptr<TcpStoreServer> server_;
  double bound_s_;
  std::atomic<bool> unsettled_{false};
  std::atomic<bool> store_gone_{false};
};

}  // namespace braid
