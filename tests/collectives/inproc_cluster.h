// tests/collectives/inproc_cluster.h - n ranks as threads on one inproc Fabric, fully connected.
//
// Built once per world size and reused by many cases (each operation gets a fresh op id), so
// a sweep of hundreds of collectives costs threads, not connection set-up.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
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
  transport::Transport& transport(int rank) { return *transports_[static_cast<size_t>(rank)]; }
  const std::vector<transport::Connection*>& peers(int rank) const { return peers_[static_cast<size_t>(rank)]; }

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
  std::vector<std::unique_ptr<transport::Transport>> transports_;
  std::vector<std::unique_ptr<transport::Connection>> owned_;
  std::vector<std::vector<transport::Connection*>> peers_;
  uint64_t op_id_ = 0;
};

}  // namespace braid::collectives::testing
