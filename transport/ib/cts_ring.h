// transport/ib/cts_ring.h - the credit bookkeeping of one connection's two directions, without
// verbs: which receive may be advertised, what the sender may write where, and when a message
// is whole. IbConnection turns its answers into work requests.
//
// Words. Messages and receives are numbered 0, 1, 2, ... per direction (seq); message r lands
// in receive r. A clear-to-send (CTS) entry advertises receive r: its buffer address, rkey and
// capacity, written by the receiver into slot r % kCtsEntries of a ring in the sender's memory
// (ib_wire.h). A sender writes message r straight into that buffer (rendezvous), or, when r is
// at most kEagerSlotBytes and an eager slot is free, into that slot of a ring in the receiver's
// memory without waiting for any CTS (eager); the receiver copies it out when receive r is
// posted. Either way the immediate names r.
//
// Why a CTS slot is never overwritten while the sender still needs it: the receiver advertises
// r only when fewer than kCtsEntries receives are outstanding (r < completed + kCtsEntries), so
// slot r % kCtsEntries last held r - kCtsEntries, whose receive has completed, so the sender
// has already sent that message and no longer reads its entry. A sender reading a slot that a
// newer entry is being written over (it sent r eagerly and has not yet looked at r's CTS) sees
// a seq it did not expect, or an obsolete one, and ignores the entry; the newer entry's own
// immediate comes later.
//
// Why eager slots are never overwritten before they are copied out: the sender numbers its
// eager messages e = 0, 1, ... and uses slot e % kEagerSlots only while e < consumed +
// kEagerSlots, where consumed is the count of eager messages the receiver has copied out, as the
// latest CTS entry reported it. A sender short of eager credits sends rendezvous, which needs
// receive r's CTS, which carries a fresh count: no deadlock, only a round trip.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>

#include "common/status.h"
#include "transport/ib/ib_wire.h"

namespace braid::transport::ib {

// The receiving direction.
class RecvLedger {
 public:
  struct Receive {
    uint64_t seq = 0;
    void* data = nullptr;
    size_t capacity = 0;
    uint64_t cookie = 0;
    bool advertised = false;
    // Arrival state.
    uint32_t pieces_seen = 0;
    uint32_t pieces_expected = 0;  // 0 until the first immediate of a rendezvous message
    uint64_t bytes = 0;
    int eager_slot = -1;  // the slot holding its eager message, waiting to be copied out
    bool too_large = false;
    bool done = false;
  };

  // Numbers a new receive and keeps it.
  Receive& post(void* data, size_t capacity, uint64_t cookie);
  // The next receive to advertise, when the window allows one; mark it with advertised().
  Receive* next_to_advertise();
  void advertised(Receive& r);
  // An immediate from the peer (data, eager or too_large; cts belongs to the SendLedger) with
  // the bytes its write carried. A protocol error when it names a message outside the window.
  Status on_imm(const Imm& imm, uint64_t byte_len);
  // The oldest receive, when it is ready to complete: done, or with its eager message arrived
  // (the caller copies it out of the slot, then calls pop_front with the slot freed).
  Receive* front_ready() {
    if (posted_.empty()) return nullptr;
    Receive& r = posted_.front();
    return r.done || r.eager_slot >= 0 ? &r : nullptr;
  }
  void pop_front();

  // Whether the next receive's message has already arrived (eagerly), with every earlier
  // receive complete: a receive posted now completes at once, without the peer.
  bool next_arrived() const {
    return posted_.empty() && completed_ == next_post_ && early_[next_post_ % kEagerSlots].seq == next_post_;
  }
  uint64_t eager_consumed() const { return eager_consumed_; }
  uint64_t completed() const { return completed_; }
  size_t outstanding() const { return posted_.size(); }
  std::deque<Receive>& posted() { return posted_; }

 private:
  // An eager message that arrived before its receive was posted. Such a message's seq lies in
  // [next_post_, next_post_ + kEagerSlots) (a sender has no more eager credits than slots), so
  // entry seq % kEagerSlots is its own until post() takes it.
  struct Early {
    uint64_t seq = kNoSeq;
    int slot = -1;
    uint64_t bytes = 0;
  };
  static constexpr uint64_t kNoSeq = ~uint64_t{0};
  uint64_t next_post_ = 0;
  uint64_t completed_ = 0;
  uint64_t advertised_upto_ = 0;  // receives below this are advertised or need no CTS
  uint64_t eager_consumed_ = 0;
  std::deque<Receive> posted_;     // seqs completed_ .. next_post_ - 1
  std::array<Early, kEagerSlots> early_{};  // eager messages that arrived before their receive
};

// The sending direction.
class SendLedger {
 public:
  enum class Way : uint8_t { wait, eager, rendezvous, too_large };
  struct Decision {
    Way way = Way::wait;
    // With wait: only the receive's CTS can move this message (it needs rendezvous, or the
    // eager credits are used up), not a local completion; the sender says so (cts_hold.h).
    bool needs_cts = false;
    uint32_t eager_slot = 0;
    CtsEntry cts;
  };

  // A CTS entry read from its slot after the immediate `imm_seq` announced it.
  void on_cts(const CtsEntry& entry, uint32_t imm_seq);
  // How the next message (of `bytes`) can go now. `use_eager`: eager is enabled for it.
  Decision decide(uint64_t bytes, bool use_eager) const;
  // The next message went the way decide() said; its seq was next_seq().
  void sent(const Decision& d);
  // The local staging copy of eager slot `slot` may be reused (its write completed).
  void staging_free(uint32_t slot) { staging_busy_[slot] = false; }

  uint64_t next_seq() const { return next_seq_; }

 private:
  uint64_t next_seq_ = 0;
  uint64_t eager_used_ = 0;
  uint64_t eager_consumed_known_ = 0;
  // Advertised receives not yet written: receive r's entry in cts_[r % kCtsEntries], with r in
  // cts_seq_ (a receiver advertises r only below its completed count + kCtsEntries, and it
  // cannot have completed a message not yet sent, so r < next_seq_ + kCtsEntries).
  std::array<CtsEntry, kCtsEntries> cts_{};
  std::array<uint64_t, kCtsEntries> cts_seq_ = no_cts();
  static constexpr std::array<uint64_t, kCtsEntries> no_cts() {
    std::array<uint64_t, kCtsEntries> a{};
    a.fill(~uint64_t{0});
    return a;
  }
  std::array<bool, kEagerSlots> staging_busy_{};
};

}  // namespace braid::transport::ib
