// transport/ib/gdr_flusher.h - the GPUDirect flush: one small RDMA READ from a receive buffer
// that the NIC just wrote, waited for before the receive is reported (gdr_flush.h says why).
//
// The READ must be served by this NIC from this host's memory, so it goes on a QP of its own
// connected to itself (loopback): the NIC is both requester and responder, reads the last bytes
// of the received message through the registration's rkey, and writes them into a small host
// sink. A READ on the connection's own QPs would be served by the peer, from the peer's memory,
// and would order nothing here.
//
// One flusher per transport, used by all its connections; flush() blocks until the READ
// completes, bounded (`bound`): the NIC answers a loopback READ in microseconds, and a flush
// that fails or times out fails the receive. Thread: the transport's owner only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "transport/ib/gdr_flush.h"
#include "transport/ib/reg_cache.h"
#include "transport/ib/verbs.h"

namespace braid::transport::ib {

// Process-wide counts (tests: every flush due was posted and completed, and read the right bytes).
struct FlushStats {
  uint64_t posted = 0;
  uint64_t completed = 0;
  uint64_t failed = 0;
  unsigned char last[8] = {};  // the bytes the last completed READ brought back
  size_t last_bytes = 0;
};
FlushStats gdr_flush_stats();

class GdrFlusher {
 public:
  static constexpr size_t kReadBytes = 8;

  // A loopback QP on `dev`'s port; `mode` is the test switch it was made under.
  static Result<std::unique_ptr<GdrFlusher>> create(const Device& dev, const QpSettings& qp, bool gdr_on,
                                                    FlushTestMode mode, std::chrono::milliseconds bound);
  GdrFlusher(const GdrFlusher&) = delete;
  GdrFlusher& operator=(const GdrFlusher&) = delete;

  // Flushes [data, data+bytes), registered as `mr`, when needs_gdr_flush says so (else returns
  // at once). `written_by_nic`: the message arrived by RDMA WRITE into this buffer.
  Status before_delivery(const Mr& mr, const void* data, size_t bytes, bool written_by_nic);

 private:
  GdrFlusher(const Device& dev, bool gdr_on, FlushTestMode mode, std::chrono::milliseconds bound)
      : dev_(dev), gdr_on_(gdr_on), mode_(mode), bound_(bound) {}
  Status flush(const Mr& mr, const void* data, size_t bytes);

  const Device& dev_;
  bool gdr_on_;
  FlushTestMode mode_;
  std::chrono::milliseconds bound_;
  CqPtr cq_;
  QpPtr qp_;
  RegisteredBuffer sink_;
  bool broken_ = false;  // a READ failed: the QP is in error, every later flush fails
};

}  // namespace braid::transport::ib
