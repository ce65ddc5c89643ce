#include "transport/ib/spin_budget.h"

#include <algorithm>

namespace braid::transport::ib {

namespace {
constexpr int64_t kTooLong = SpinBudget::kCapUs + 1;
}  // namespace

void SpinBudget::completed_after(std::chrono::microseconds waited) {
  add(std::min<int64_t>(std::max<int64_t>(waited.count(), 0), kTooLong));
}

void SpinBudget::nothing_within_cap() { add(kTooLong); }

void SpinBudget::add(int64_t us) {
  samples_[next_] = us;
  next_ = (next_ + 1) % kSamples;
  count_ = std::min(count_ + 1, kSamples);
  // Until a few waits were seen, the configured spin.
  if (count_ < 4) return;
  std::array<int64_t, kSamples> within{};
  size_t n = 0;
  for (size_t i = 0; i < count_; ++i) {
    if (samples_[i] < kTooLong) within[n++] = samples_[i];
  }
  // Most recent waits outlasted the cap: the peer is busy elsewhere, spinning would not reach it.
  if (n * 2 <= count_) {
    budget_us_ = base_us_;
    return;
  }
  // Of the waits that ended within the cap, the one three in four did not exceed, with ample
  // slack: one slow round trip in a few does not send the next wait to sleep, and a wait that
  // does sleep pays a wake-up, which on a loaded or emulated machine costs far more than the
  // round trip it waits for. Waits past the cap do
  // not lower it while they are the minority: on a loaded machine a wait that ended asleep
  // often took long only because waking up did, which is what spinning avoids.
  const auto at = within.begin() + static_cast<std::ptrdiff_t>((n * 3) / 4);
  std::nth_element(within.begin(), at, within.begin() + static_cast<std::ptrdiff_t>(n));
  const int64_t q = *at;
  budget_us_ = std::clamp<int64_t>(4 * q + 1, base_us_, std::max(base_us_, kCapUs));
}

}  // namespace braid::transport::ib
