// tests/collectives/inproc_cluster.h - n ranks as threads on one inproc Fabric, fully connected,
// each rank's connections held by a runtime::PeerLinks, so tests drive collectives through the
// same poll loop the library does.
//
// Built once per world size and reused by many cases (each operation gets a fresh op id), so
// a sweep of hundreds of collectives costs threads, not connection set-up.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "collectives/collective.h"
#include "common/status.h"
#include "runtime/links/peer_links.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/transport.h"

namespace braid::collectives::testing {

class InprocCluster {
 public:
  explicit InprocCluster(int size);
  ~InprocCluster();
  InprocCluster(const InprocCluster&) = delete;
  InprocCluster& operator=(const InprocCluster&) = delete;

  int size() const { return size_; }
  transport::inproc::Fabric& fabric() { return fabric_; }
  PeerLinks& links(int rank) { return *links_[static_cast<size_t>(rank)]; }
  const std::vector<transport::Connection*>& peers(int rank) const { return links_[static_cast<size_t>(rank)]->peers(); }

  // One cluster per world size, kept for the whole test program; drop_shared() forgets one
  // whose connections a failed run closed.
  static InprocCluster& shared(int size);
  static void drop_shared(int size);

  // Runs fn(rank) on one thread per rank and returns each rank's Status.
  std::vector<Status> run(const std::function<Status(int rank)>& fn);
  uint64_t next_op_id() { return ++op_id_; }

 private:
  int size_;
  transport::inproc::Fabric fabric_;
  std::vector<std::unique_ptr<PeerLinks>> links_;
  uint64_t op_id_ = 0;
};

// Runs one collective to completion on the calling thread as the runtime does: prepared, then
// driven by links.drive() until done or options.deadline; after a failure the connections
// still holding its operations are closed and drained. Errors begin "<name> on rank R: ".
Status run_collective(const CollectiveArgs& args, int rank, int size, PeerLinks& links, const RunOptions& options,
                      Algo* algo_used = nullptr);

}  // namespace braid::collectives::testing
