#include "transport/ib/cts_hold.h"

#include <algorithm>

#include "transport/ib/ib_wire.h"

namespace braid::transport::ib {

bool CtsHold::expect_eager(size_t capacity) const {
  return capacity <= kEagerSlotBytes || capacity == eager_capacity_;
}

bool CtsHold::hold(const Receive& r, Clock::time_point now) {
  overdue_ = false;
  if (!r.newest || r.seq < requested_upto_ || !expect_eager(r.capacity)) return false;
  if (r.credits_unreported >= kEagerSlots / 2) return false;
  if (held_seq_ != r.seq) {
    held_seq_ = r.seq;
    held_since_ = now;
  }
  holding_ = now - held_since_ < timeout_;
  overdue_ = !holding_;
  return holding_;
}

std::optional<CtsHold::Clock::time_point> CtsHold::due() const {
  if (!holding_) return std::nullopt;
  return held_since_ + timeout_;
}

void CtsHold::requested(uint64_t seq) { requested_upto_ = std::max(requested_upto_, seq + 1); }

void CtsHold::landed(size_t capacity, bool eagerly) {
  if (capacity <= kEagerSlotBytes) return;
  if (eagerly) {
    eager_capacity_ = capacity;
  } else if (capacity == eager_capacity_) {
    eager_capacity_ = 0;
  }
}

}  // namespace braid::transport::ib
