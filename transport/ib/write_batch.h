// transport/ib/write_batch.h - the work requests one pass of a connection posts, rung with one
// doorbell per QP.
//
// A doorbell (ibv_post_send) costs a write to the NIC's doorbell register; on Soft-RoCE it is a
// system call that runs the whole packet path. A pass that starts several sends, or advertises
// several receives, queues their work requests here and posts each QP's list as one chain at
// the end of the pass. Order within a QP is the order of add(), which is what the protocol's
// per-QP ordering needs; nothing orders QPs against each other anyway.
//
// What a queued work request points at (its payload, an inline source, a CTS staging slot)
// must stay unchanged until flush(): IbConnection flushes before its pass returns.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/ib/verbs.h"

namespace braid::transport::ib {

class WriteBatch {
 public:
  explicit WriteBatch(size_t nqps) : lanes_(nqps) {}

  // Queues `wr` (its sg_list, if any, is copied; `next` is ignored) for QP `qp`.
  void add(uint32_t qp, const ibv_send_wr& wr);
  bool empty() const { return queued_ == 0; }
  // Posts every QP's queue as one chain. Counts doorbells and work requests into *doorbells and
  // *work_requests (may be null). On failure, says which QP and how many were not posted.
  Status flush(const std::vector<QpPtr>& qps, uint64_t* doorbells, uint64_t* work_requests);
  // Forgets what is queued (the connection failed: its QPs are in the error state).
  void clear();

 private:
  struct Lane {
    std::vector<ibv_send_wr> wrs;
    std::vector<ibv_sge> sges;  // one per work request (zero-byte writes leave theirs unused)
  };
  std::vector<Lane> lanes_;
  size_t queued_ = 0;  // work requests in all lanes
};

}  // namespace braid::transport::ib
