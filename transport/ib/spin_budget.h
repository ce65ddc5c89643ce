// transport/ib/spin_budget.h - how long the ib transport's poll() spins on its CQs before it
// arms them and sleeps on the completion channel, learned from how long recent waits took.
//
// Why not a fixed BRAID_SPIN_US: a completion-channel wake-up (an interrupt, epoll, the CQ
// event read and its ack) costs far more than polling a CQ, and whether a completion is near
// depends on the fabric. A message on an HCA answers in microseconds, so the default spin
// covers it; on Soft-RoCE, and worse under emulation, a round trip takes longer than that
// spin, so every wait ended in the kernel and paid the wake-up on top of the round trip
// (docs/ib.md has the figures). The budget therefore follows the waits that ended with a
// completion: four times a high quantile of those among the last kSamples that ended within
// kCapUs, but never less than BRAID_SPIN_US and never more than kCapUs. A wait that
// outlasted the cap (the peer is computing, or the job is idle) counts as "too long"; when
// such waits are the majority the budget falls back to BRAID_SPIN_US, since spinning would not
// have reached the completion anyway. Whether a wait may spin at all is still common/spin.h's
// decision.
//
// Pure (no clock, no verbs): the transport reports each wait, tests feed made-up ones.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace braid::transport::ib {

class SpinBudget {
 public:
  static constexpr size_t kSamples = 16;
  static constexpr int64_t kCapUs = 2000;

  explicit SpinBudget(int base_us) : base_us_(base_us < 0 ? 0 : base_us) {}

  // A wait that ended when a completion arrived `waited` after it began (while spinning or
  // asleep).
  void completed_after(std::chrono::microseconds waited);
  // A wait that saw no completion within kCapUs (it slept longer, or gave up at its timeout).
  void nothing_within_cap();

  // How long the next wait spins.
  std::chrono::microseconds budget() const { return std::chrono::microseconds(budget_us_); }

 private:
  void add(int64_t us);

  int64_t base_us_;
  int64_t budget_us_ = base_us_;
  std::array<int64_t, kSamples> samples_{};
  size_t count_ = 0, next_ = 0;
};

}  // namespace braid::transport::ib
