// transport/ib/cts_hold.h - whether the clear-to-send of the newest receive may wait (no verbs).
//
// A small message needs no CTS: it goes eagerly, and once it has arrived its receive needs none
// either. Writing the CTS anyway costs a work request, a doorbell (a system call on Soft-RoCE)
// and a completion at each end, per message. So the receiver holds back the CTS of its newest
// receive while that receive's message is expected to come eagerly: always when the receive is
// at most kEagerSlotBytes (its message cannot be larger), and for a larger receive when the
// last message that landed in a receive of exactly that capacity came eagerly (the runtime
// posts its first receive of an operation with room for a header and 64 KiB whatever the
// operation's size: its capacity says nothing, its history does).
//
// Held back, a CTS is written when:
// - a later receive is posted (CTS entries go out in order);
// - the sender asks for it: a sender whose next message needs a CTS (rendezvous, or eager
//   credits used up) writes a request to send (RTS, ib_wire.h) naming that message once; from
//   then on every receive up to it is advertised at once. This is what keeps a wrong guess
//   from costing more than a round trip: no sender waits on a held CTS without saying so;
// - the eager count to report has moved kEagerSlots / 2 past the one the last CTS carried
//   (credits travel only in CTS entries: the sender should not run short in the first place);
// - it has been held for kTimeout (a bound for the case nothing above covers; the transport's
//   sleep is bounded by due()). Tests that must tell this bound apart from the cases above
//   lengthen it (set_timeout), since a stalled machine reaches 1 ms often.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace braid::transport::ib {

class CtsHold {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kTimeout = std::chrono::milliseconds(1);

  struct Receive {
    uint64_t seq = 0;
    size_t capacity = 0;
    bool newest = false;                 // no receive was posted after it
    uint64_t credits_unreported = 0;     // eager messages copied out since the last CTS
  };

  // The bound a CTS is held for at most: kTimeout unless a test set another.
  void set_timeout(Clock::duration timeout) { timeout_ = timeout; }

  // Whether r's CTS may wait now. Remembers since when r has waited.
  bool hold(const Receive& r, Clock::time_point now);
  // Whether the last hold() said no only because its receive had waited the bound.
  bool overdue() const { return overdue_; }
  // The CTS held back, when it is due at the latest (nullopt when none is).
  std::optional<Clock::time_point> due() const;
  // A pass over the receives to advertise starts (hold() is asked again for the one held).
  void pass_begins() { holding_ = false; }
  // The sender asked for the CTS of receive `seq` (an RTS arrived): it and those before it.
  void requested(uint64_t seq);
  // A receive of `capacity` took its message, eagerly or by rendezvous.
  void landed(size_t capacity, bool eagerly);

  uint64_t requested_upto() const { return requested_upto_; }

 private:
  bool expect_eager(size_t capacity) const;

  Clock::duration timeout_ = kTimeout;
  uint64_t requested_upto_ = 0;  // receives below this were asked for
  size_t eager_capacity_ = 0;    // a capacity above the eager size whose last message came eagerly
  uint64_t held_seq_ = ~uint64_t{0};
  Clock::time_point held_since_{};
  bool holding_ = false;
  bool overdue_ = false;
};

}  // namespace braid::transport::ib
