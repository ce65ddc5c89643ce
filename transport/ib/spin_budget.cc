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
  std::array<int64_t, kSamples> sorted = samples_;
  const auto end = sorted.begin() + static_cast<std::ptrdiff_t>(count_);
  // The wait that three in four recent ones did not exceed: one slow round trip in a few does
  // not send the next wait to sleep, and a few fast ones do not shorten the spin below most.
  const auto at = sorted.begin() + static_cast<std::ptrdiff_t>((count_ * 3) / 4);
  std::nth_element(sorted.begin(), at, end);
  const int64_t q = *at;
  if (q >= kTooLong) {
    budget_us_ = base_us_;
    return;
  }
  // Slack for a wait a little longer than those seen.
  budget_us_ = std::clamp<int64_t>(q + q / 2 + 1, base_us_, std::max(base_us_, kCapUs));
}

}  // namespace braid::transport::ib
