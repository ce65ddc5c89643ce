// transport/ib/gdr_flush.h - when received data must be flushed before the consumer sees it.
//
// An RDMA WRITE into GPU memory (a dma-buf registration) is acknowledged by the NIC once its
// PCIe writes are posted, not once they are visible to the GPU: the write-with-immediate's
// completion can reach the CPU while the last bytes still sit in a PCIe switch or the GPU's
// ingress queue. PCIe orders a read behind earlier posted writes on the same path, so an RDMA
// READ that the NIC serves from the same memory region completes only after those writes have
// landed. That READ is the flush (gdr_flusher.h issues it); this header decides when one is due.
//
// A flush is due for a receive whose bytes the NIC wrote directly (a rendezvous message, not an
// eager one that the CPU copied out of a host slot), when it is not empty, and when its
// registration is CUDA memory registered through dma-buf, which exists only where the GPUDirect
// decision (gdr.h) chose dma-buf. Host memory is coherent with the NIC's writes and needs none.
//
// A test-only switch also flushes host memory, so that the mechanism itself runs on Soft-RoCE,
// which refuses dma-buf registrations: the READ is posted, completes, and the data is then
// delivered intact. A second test mode corrupts the READ's rkey, to prove that a broken flush
// is caught (the READ fails and so does the receive). Nothing outside tests sets it.
#pragma once

#include <cstddef>

#include "transport/transport.h"

namespace braid::transport::ib {

enum class FlushTestMode {
  off,              // flush only GPU memory (the library's behaviour)
  host_memory,      // flush host memory too
  wrong_rkey,       // as host_memory, with a corrupted rkey: every flush must fail
};

struct FlushCase {
  bool gdr_on = false;               // decide_gdr chose dma-buf for this transport
  MemoryKind memory = MemoryKind::host;  // the receive buffer's registration
  bool written_by_nic = false;       // RDMA WRITE into the buffer (not copied from an eager slot)
  size_t bytes = 0;                  // the message's length
};

// Whether the receive in `c` needs a flush before its completion is reported.
bool needs_gdr_flush(const FlushCase& c, FlushTestMode mode);

// Whether a transport needs a flusher at all: GPUDirect is on, or a test mode asks for one.
bool wants_flusher(bool gdr_on, FlushTestMode mode);

// The process-wide test switch: read by each ib transport when it is created. Tests only.
void set_flush_test_mode(FlushTestMode mode);
FlushTestMode flush_test_mode();

}  // namespace braid::transport::ib
