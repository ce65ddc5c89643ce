#include "transport/ib/gdr_flush.h"

#include <atomic>

namespace braid::transport::ib {

namespace {
std::atomic<FlushTestMode> test_mode{FlushTestMode::off};
}  // namespace

bool needs_gdr_flush(const FlushCase& c, FlushTestMode mode) {
  if (!c.written_by_nic || c.bytes == 0) return false;
  if (mode != FlushTestMode::off) return true;
  // CUDA memory reaches the NIC only through a dma-buf registration, which gdr_on allows; the
  // check of both keeps a registration made some other way from being trusted as flushable.
  return c.gdr_on && c.memory == MemoryKind::cuda;
}

bool wants_flusher(bool gdr_on, FlushTestMode mode) { return gdr_on || mode != FlushTestMode::off; }

void set_flush_test_mode(FlushTestMode mode) { test_mode.store(mode); }

FlushTestMode flush_test_mode() { return test_mode.load(); }

}  // namespace braid::transport::ib
