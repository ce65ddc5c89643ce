// Which clear-to-send the receiver holds back (transport/ib/cts_hold.h), on a clock the test
// moves: the newest small receive waits until a later receive, the sender's request, a credit
// report or the bound releases it; a larger receive waits only when its capacity's last
// message came eagerly.
#include <gtest/gtest.h>

#include "transport/ib/cts_hold.h"
#include "transport/ib/ib_wire.h"

namespace braid::transport::ib {
namespace {

using Clock = CtsHold::Clock;
const Clock::time_point t0{std::chrono::seconds(100)};

CtsHold::Receive newest(uint64_t seq, size_t capacity = 64) { return CtsHold::Receive{seq, capacity, true, 0}; }

TEST(CtsHold, TheNewestSmallReceiveWaitsUntilTheBound) {
  CtsHold h;
  EXPECT_TRUE(h.hold(newest(0), t0));
  ASSERT_TRUE(h.due().has_value());
  EXPECT_EQ(*h.due(), t0 + CtsHold::kTimeout);
  EXPECT_TRUE(h.hold(newest(0), t0 + CtsHold::kTimeout / 2));
  EXPECT_FALSE(h.overdue());
  EXPECT_FALSE(h.hold(newest(0), t0 + CtsHold::kTimeout));
  EXPECT_TRUE(h.overdue());
  h.pass_begins();
  EXPECT_FALSE(h.due().has_value());
  // The next receive's wait starts when it is first asked about.
  EXPECT_TRUE(h.hold(newest(1), t0 + CtsHold::kTimeout));
  EXPECT_EQ(*h.due(), t0 + 2 * CtsHold::kTimeout);
}

TEST(CtsHold, AReceiveWithALaterOneIsNotHeld) {
  CtsHold h;
  EXPECT_FALSE(h.hold(CtsHold::Receive{0, 64, false, 0}, t0));
  EXPECT_FALSE(h.overdue());
  EXPECT_FALSE(h.due().has_value());
}

TEST(CtsHold, TheSendersRequestReleasesThatReceiveAndThoseBefore) {
  CtsHold h;
  h.requested(5);
  EXPECT_FALSE(h.hold(newest(3), t0));
  EXPECT_FALSE(h.hold(newest(5), t0));
  EXPECT_FALSE(h.overdue());
  EXPECT_TRUE(h.hold(newest(6), t0));
  h.requested(2);  // an older request changes nothing
  EXPECT_EQ(h.requested_upto(), 6u);
}

TEST(CtsHold, UnreportedCreditsReleaseIt) {
  CtsHold h;
  EXPECT_TRUE(h.hold(CtsHold::Receive{0, 64, true, kEagerSlots / 2 - 1}, t0));
  EXPECT_FALSE(h.hold(CtsHold::Receive{0, 64, true, kEagerSlots / 2}, t0));
}

TEST(CtsHold, ALargerReceiveWaitsOnlyWhenItsCapacitysLastMessageCameEagerly) {
  CtsHold h;
  const size_t roomy = 65600;
  EXPECT_FALSE(h.hold(newest(0, roomy), t0));  // nothing known: advertised at once
  h.landed(roomy, true);
  EXPECT_TRUE(h.hold(newest(1, roomy), t0));
  EXPECT_FALSE(h.hold(newest(1, roomy + 1), t0));  // another capacity: not known
  h.landed(roomy + 1, false);                      // says nothing of `roomy`
  EXPECT_TRUE(h.hold(newest(1, roomy), t0));
  h.landed(roomy, false);
  EXPECT_FALSE(h.hold(newest(2, roomy), t0));
  h.landed(kEagerSlotBytes, false);  // small receives are always held: not recorded
  EXPECT_TRUE(h.hold(newest(2, kEagerSlotBytes), t0));
}

}  // namespace
}  // namespace braid::transport::ib
