#include "runtime/engine/op_fifo.h"

namespace braid {

void OpFifo::grow() {
  std::vector<PendingOp> bigger(slots_.empty() ? 4 : 2 * slots_.size());
  for (size_t i = 0; i < size_; ++i) bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
  slots_.swap(bigger);
  head_ = 0;
}

}  // namespace braid
