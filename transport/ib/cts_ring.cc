#include "transport/ib/cts_ring.h"

#include <algorithm>
#include <string>

namespace braid::transport::ib {

RecvLedger::Receive& RecvLedger::post(void* data, size_t capacity, uint64_t cookie) {
  Receive r;
  r.seq = next_post_++;
  r.data = data;
  r.capacity = capacity;
  r.cookie = cookie;
  Early& early = early_[r.seq % kEagerSlots];
  if (early.seq == r.seq) {
    r.eager_slot = early.slot;
    r.bytes = early.bytes;
    early.seq = kNoSeq;
  }
  posted_.push_back(r);
  return posted_.back();
}

RecvLedger::Receive* RecvLedger::next_to_advertise() {
  while (advertised_upto_ < next_post_) {
    Receive& r = posted_[advertised_upto_ - completed_];
    if (r.eager_slot >= 0 || r.done) {
      ++advertised_upto_;  // its message is already here: no CTS needed
      continue;
    }
    if (r.seq >= completed_ + kCtsEntries) return nullptr;
    return &r;
  }
  return nullptr;
}

void RecvLedger::advertised(Receive& r) {
  r.advertised = true;
  advertised_upto_ = r.seq + 1;
}

Status RecvLedger::on_imm(const Imm& imm, uint64_t byte_len) {
  const uint64_t seq = widen_seq(imm.seq, completed_);
  // Named only when something is wrong: this runs once per message.
  const auto which = [seq] { return "message " + std::to_string(seq); };
  if (imm.kind == ImmKind::eager) {
    if (imm.aux >= kEagerSlots || byte_len > kEagerSlotBytes) {
      return protocol_error("an eager " + which() + " in slot " + std::to_string(imm.aux) + " of " +
                            std::to_string(byte_len) + " bytes, outside the eager ring");
    }
    if (seq >= next_post_) {
      Early& early = early_[seq % kEagerSlots];
      if (seq >= next_post_ + kEagerSlots || early.seq == seq) {
        return protocol_error("an eager " + which() + " far ahead of the receives posted (" +
                              std::to_string(next_post_) + ") or twice");
      }
      early = Early{seq, static_cast<int>(imm.aux), byte_len};
      return Status::ok();
    }
    Receive& r = posted_[seq - completed_];
    if (r.eager_slot >= 0 || r.pieces_seen > 0 || r.done) return protocol_error("a second copy of " + which());
    r.eager_slot = static_cast<int>(imm.aux);
    r.bytes = byte_len;
    return Status::ok();
  }
  if (seq >= next_post_ || !posted_[seq - completed_].advertised) {
    return protocol_error("a write for " + which() + ", whose receive was never advertised");
  }
  Receive& r = posted_[seq - completed_];
  if (r.done || r.eager_slot >= 0) return protocol_error("a write for " + which() + " after it was complete");
  if (imm.kind == ImmKind::too_large) {
    r.too_large = true;
    r.done = true;
    return Status::ok();
  }
  const uint32_t expected = imm.aux + 1;
  if (r.pieces_expected != 0 && r.pieces_expected != expected) {
    return protocol_error(which() + " announced " + std::to_string(expected) + " pieces after " +
                          std::to_string(r.pieces_expected));
  }
  r.pieces_expected = expected;
  r.bytes += byte_len;
  if (r.bytes > r.capacity) {
    return protocol_error(which() + " wrote " + std::to_string(r.bytes) + " bytes into a receive of " +
                          std::to_string(r.capacity));
  }
  if (++r.pieces_seen == expected) r.done = true;
  return Status::ok();
}

void RecvLedger::pop_front() {
  if (posted_.front().eager_slot >= 0) ++eager_consumed_;
  posted_.pop_front();
  ++completed_;
  advertised_upto_ = std::max(advertised_upto_, completed_);
}

void SendLedger::on_cts(const CtsEntry& entry, uint32_t imm_seq) {
  if ((entry.seq & kImmSeqMask) != imm_seq) return;  // overwritten by a newer entry since: stale
  const auto ahead = static_cast<int32_t>(entry.seq - static_cast<uint32_t>(next_seq_));
  if (ahead < 0) return;  // that message went eagerly
  eager_consumed_known_ = std::max(eager_consumed_known_, entry.eager_consumed);
  if (static_cast<uint64_t>(ahead) >= kCtsEntries) return;  // beyond any window: not a CTS this end can use
  const uint64_t seq = next_seq_ + static_cast<uint64_t>(ahead);
  cts_[seq % kCtsEntries] = entry;
  cts_seq_[seq % kCtsEntries] = seq;
}

SendLedger::Decision SendLedger::decide(uint64_t bytes, bool use_eager) const {
  Decision d;
  const uint32_t slot = static_cast<uint32_t>(eager_used_ % kEagerSlots);
  const bool eager_credit = use_eager && bytes <= kEagerSlotBytes && eager_used_ < eager_consumed_known_ + kEagerSlots;
  if (eager_credit && !staging_busy_[slot]) {
    d.way = Way::eager;
    d.eager_slot = slot;
    return d;
  }
  const size_t at = next_seq_ % kCtsEntries;
  if (cts_seq_[at] != next_seq_) {
    d.needs_cts = !eager_credit;  // else the staging copy's own completion frees the way
    return d;
  }
  d.cts = cts_[at];
  d.way = bytes > d.cts.size ? Way::too_large : Way::rendezvous;
  return d;
}

void SendLedger::sent(const Decision& d) {
  if (d.way == Way::eager) {
    ++eager_used_;
    staging_busy_[d.eager_slot] = true;
  }
  cts_seq_[next_seq_ % kCtsEntries] = ~uint64_t{0};
  ++next_seq_;
}

}  // namespace braid::transport::ib
