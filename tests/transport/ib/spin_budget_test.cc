// SpinBudget (transport/ib/spin_budget.h): how long the ib transport spins before it sleeps on
// the completion channel, fed made-up waits.
#include "transport/ib/spin_budget.h"

#include <gtest/gtest.h>

namespace braid::transport::ib {
namespace {

using us = std::chrono::microseconds;

TEST(SpinBudget, StartsAtTheConfiguredSpin) {
  SpinBudget b(50);
  EXPECT_EQ(b.budget(), us(50));
  b.completed_after(us(300));
  b.completed_after(us(300));
  b.completed_after(us(300));
  EXPECT_EQ(b.budget(), us(50)) << "three waits are too few to go by";
  EXPECT_EQ(SpinBudget(-5).budget(), us(0));
}

TEST(SpinBudget, CoversWaitsLongerThanTheConfiguredSpin) {
  SpinBudget b(50);
  for (int i = 0; i < 16; ++i) b.completed_after(us(70));
  EXPECT_GT(b.budget(), us(70));
  EXPECT_LE(b.budget(), us(4 * 70 + 1));
}

TEST(SpinBudget, NeverBelowTheConfiguredSpin) {
  SpinBudget b(50);
  for (int i = 0; i < 16; ++i) b.completed_after(us(3));
  EXPECT_EQ(b.budget(), us(50));  // an HCA's round trip: the configured spin covers it
  SpinBudget zero(0);
  for (int i = 0; i < 16; ++i) zero.completed_after(us(0));
  EXPECT_EQ(zero.budget(), us(1));
}

TEST(SpinBudget, BoundedByTheCap) {
  SpinBudget b(50);
  for (int i = 0; i < 16; ++i) b.completed_after(us(SpinBudget::kCapUs - 10));
  EXPECT_EQ(b.budget(), us(SpinBudget::kCapUs));
  // A configured spin above the cap is kept as it is.
  SpinBudget big(100000);
  for (int i = 0; i < 16; ++i) big.completed_after(us(10));
  EXPECT_EQ(big.budget(), us(100000));
}

TEST(SpinBudget, OneSlowWaitInAFewDoesNotMoveIt) {
  SpinBudget b(50);
  for (int i = 0; i < 16; ++i) b.completed_after(us(i % 8 == 0 ? 1500 : 80));
  EXPECT_LE(b.budget(), us(4 * 80 + 1));
  // Nor does a minority of waits past the cap (a loaded machine's slow wake-ups).
  for (int i = 0; i < 16; ++i) {
    if (i % 3 == 0) {
      b.nothing_within_cap();
    } else {
      b.completed_after(us(80));
    }
  }
  EXPECT_GT(b.budget(), us(80));
  EXPECT_LE(b.budget(), us(4 * 80 + 1));
}

TEST(SpinBudget, IdleWaitsSendItBackToTheConfiguredSpin) {
  SpinBudget b(50);
  for (int i = 0; i < 16; ++i) b.completed_after(us(100));
  ASSERT_GT(b.budget(), us(100));
  // The peer starts computing (or the job goes idle): waits outlast the cap. While they are the
  // minority of the recent ones the spin stays; once they are half, it is back at
  // BRAID_SPIN_US, and it stays there.
  for (size_t i = 0; i < SpinBudget::kSamples / 2 - 1; ++i) b.nothing_within_cap();
  EXPECT_GT(b.budget(), us(100));
  b.nothing_within_cap();
  EXPECT_EQ(b.budget(), us(50));
  for (int i = 0; i < 40; ++i) b.nothing_within_cap();
  EXPECT_EQ(b.budget(), us(50));
  // Completions that come long after the cap count the same way.
  SpinBudget c(50);
  for (int i = 0; i < 16; ++i) c.completed_after(us(100));
  for (int i = 0; i < 16; ++i) c.completed_after(us(500000));
  EXPECT_EQ(c.budget(), us(50));
  // And a fast peer again brings it back up.
  for (int i = 0; i < 16; ++i) c.completed_after(us(100));
  EXPECT_GT(c.budget(), us(100));
}

}  // namespace
}  // namespace braid::transport::ib
