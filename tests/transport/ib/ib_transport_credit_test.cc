// The credit bookkeeping (transport/ib/cts_ring.h) driven through a simulated pair of QPs: the
// sender's and receiver's ledgers exchange CTS entries and messages as bytes written into each
// other's rings and buffers, over nqps in-order lanes per direction, with every completion
// processed at a random later time (so a CTS slot may be overwritten before its immediate is
// read, as on a NIC). Each receive must get exactly its message, in order; a message larger
// than its receive must be flagged, not written; an eager slot must never be overwritten before
// it is copied out (the copied bytes would differ). With `hold`, the receiver holds back the CTS
// of its newest receive as cts_hold.h says, on a clock that never moves (so the bound never
// releases one), and the sender asks (RTS) whenever its next message needs a CTS: no message
// may wait forever on a held CTS.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "transport/ib/cts_hold.h"
#include "transport/ib/cts_ring.h"
#include "transport/ib/stripe_plan.h"

namespace braid::transport::ib {
namespace {

using Bytes = std::vector<uint8_t>;

struct Write {
  unsigned char* target = nullptr;  // where the payload lands
  Bytes payload;
  bool has_imm = false;
  uint32_t imm = 0;
  uint64_t send_seq = 0;  // forward writes: the message whose completion counts it
};

struct Cqe {
  uint32_t imm = 0;
  uint64_t bytes = 0;
};

class Pair {
 public:
  // `one_at_a_time`: a receive is posted only when the previous one completed, so every
  // receive is the newest one (a ping-pong's pattern): the one whose CTS may be held back.
  Pair(uint32_t nqps, uint64_t seed, bool hold = false, bool one_at_a_time = false)
      : nqps_(nqps), rng_(seed), fwd_(nqps), back_(nqps), hold_cts_(hold), one_at_a_time_(one_at_a_time) {}

  // Runs until `total` messages have been received (or a step limit, which fails the test).
  void run(size_t total) {
    for (size_t step = 0; step < 50'000'000 && received_ < total; ++step) {
      switch (rng_() % 8) {
        case 0:
          if (posted_recvs_ < total && recv_.outstanding() < (one_at_a_time_ ? 1 : kCtsEntries)) post_recv();
          break;
        case 1:
          if (messages_.size() < total && sent_unfinished() < 300) post_send();
          break;
        case 2: deliver(fwd_, receiver_cq_); break;
        case 3: deliver(back_, sender_cq_); break;
        case 4: process_receiver_cq(); break;
        case 5: process_sender_cq(); break;
        case 6: receiver_progress(); break;
        default: sender_progress(); break;
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
    ASSERT_EQ(received_, total) << "stalled: posted " << posted_recvs_ << " receives, " << messages_.size()
                                << " messages, next to send " << send_.next_seq();
  }

  size_t eager_count() const { return eager_; }
  size_t too_large_count() const { return too_large_; }
  size_t cts_count() const { return cts_; }
  size_t rts_count() const { return rts_; }

 private:
  struct Message {
    Bytes data;
    size_t capacity = 0;  // of the receive that will take it
    uint32_t writes_left = 0;
    int eager_slot = -1;
    bool started = false;
  };

  size_t sent_unfinished() const { return messages_.size() - sends_done_; }

  Bytes random_bytes(size_t n) {
    Bytes b(n);
    for (auto& x : b) x = static_cast<uint8_t>(rng_());
    return b;
  }

  size_t random_size() {
    switch (rng_() % 4) {
      case 0: return rng_() % 3;                              // 0, 1, 2
      case 1: return 1 + rng_() % kEagerSlotBytes;             // eager sizes
      case 2: return kEagerSlotBytes + 1 + rng_() % 300'000;  // rendezvous, striped when large
      default: return rng_() % 2000;
    }
  }

  // Messages are made in order, each with its receive's capacity decided up front (5% too small).
  Message& message(size_t seq) {
    while (messages_.size() <= seq) {
      Message m;
      m.data = random_bytes(random_size());
      m.capacity = m.data.size() + (rng_() % 3 == 0 ? rng_() % 100 : 0);
      // As the runtime's first receive of an operation: room for far more than most messages.
      if (m.data.size() <= kRoomy && rng_() % 3 == 0) m.capacity = kRoomy;
      if (!m.data.empty() && rng_() % 20 == 0) m.capacity = m.data.size() - 1 - rng_() % m.data.size();
      messages_.push_back(std::move(m));
    }
    return messages_[seq];
  }

  void post_recv() {
    const size_t seq = posted_recvs_++;
    buffers_.push_back(Bytes(message(seq).capacity + 1, 0xee));  // one guard byte past the capacity
    Bytes& b = buffers_.back();
    recv_.post(b.data(), message(seq).capacity, seq);
  }

  void post_send() { message(messages_.size()); }

  void receiver_progress() {
    while (RecvLedger::Receive* r = recv_.front_ready()) {
      const Message& m = messages_[r->seq];
      Bytes& buf = buffers_[r->seq];
      const bool too_large = m.data.size() > m.capacity;
      if (r->eager_slot >= 0) {
        ASSERT_EQ(r->bytes, m.data.size());
        if (!too_large) std::memcpy(buf.data(), eager_ring_.data() + size_t(r->eager_slot) * kEagerSlotBytes, r->bytes);
      } else {
        ASSERT_EQ(r->too_large, too_large) << "message " << r->seq;
      }
      if (!too_large) {
        ASSERT_EQ(r->bytes, m.data.size()) << "message " << r->seq;
        ASSERT_TRUE(std::equal(m.data.begin(), m.data.end(), buf.begin())) << "message " << r->seq;
      }
      ASSERT_EQ(buf[m.capacity], 0xee) << "receive " << r->seq << " was overrun";
      too_large_ += too_large;
      if (!r->too_large) hold_.landed(r->capacity, r->eager_slot >= 0);
      ++received_;
      recv_.pop_front();
    }
    while (RecvLedger::Receive* r = recv_.next_to_advertise()) {
      const CtsHold::Receive ask{r->seq, r->capacity, recv_.posted().back().seq == r->seq,
                                 recv_.eager_consumed() - consumed_reported_};
      if (hold_cts_ && hold_.hold(ask, CtsHold::Clock::time_point{})) break;
      consumed_reported_ = recv_.eager_consumed();
      ++cts_;
      CtsEntry e{reinterpret_cast<uint64_t>(r->data), r->capacity, 0, static_cast<uint32_t>(r->seq),
                 recv_.eager_consumed()};
      Write w;
      w.target = cts_ring_.data() + (r->seq % kCtsEntries) * kCtsEntryBytes;
      w.payload.resize(kCtsEntryBytes);
      encode(e, w.payload.data());
      w.has_imm = true;
      w.imm = encode_imm(ImmKind::cts, 0, r->seq);
      back_[r->seq % nqps_].push_back(std::move(w));
      recv_.advertised(*r);
    }
  }

  void sender_progress() {
    for (size_t seq = send_.next_seq(); seq < messages_.size(); seq = send_.next_seq()) {
      Message& m = messages_[seq];
      const SendLedger::Decision d = send_.decide(m.data.size(), true);
      if (d.way == SendLedger::Way::wait) {
        if (hold_cts_ && d.needs_cts && seq >= asked_upto_) {  // the request to send
          Write w;
          w.has_imm = true;
          w.imm = encode_imm(ImmKind::cts, kImmAuxRts, seq);
          w.send_seq = kNoMessage;
          fwd_[seq % nqps_].push_back(std::move(w));
          asked_upto_ = seq + 1;
          ++rts_;
        }
        return;
      }
      m.started = true;
      if (d.way == SendLedger::Way::eager) {
        Write w;
        w.target = eager_ring_.data() + size_t(d.eager_slot) * kEagerSlotBytes;
        w.payload = m.data;
        w.has_imm = true;
        w.imm = encode_imm(ImmKind::eager, d.eager_slot, seq);
        w.send_seq = seq;
        m.eager_slot = static_cast<int>(d.eager_slot);
        m.writes_left = 1;
        fwd_[seq % nqps_].push_back(std::move(w));
        ++eager_;
      } else if (d.way == SendLedger::Way::too_large) {
        ASSERT_GT(m.data.size(), m.capacity);
        Write w;
        w.has_imm = true;
        w.imm = encode_imm(ImmKind::too_large, 0, seq);
        w.send_seq = seq;
        m.writes_left = 1;
        fwd_[seq % nqps_].push_back(std::move(w));
      } else {
        ASSERT_EQ(d.cts.size, m.capacity);
        const StripePlan plan = plan_stripes(seq, m.data.size(), nqps_, 64 * 1024, 100'000);
        for (const Piece& p : plan.pieces) {
          Write w;
          w.target = reinterpret_cast<unsigned char*>(d.cts.addr) + p.offset;
          w.payload.assign(m.data.begin() + static_cast<std::ptrdiff_t>(p.offset),
                           m.data.begin() + static_cast<std::ptrdiff_t>(p.offset + p.bytes));
          w.has_imm = true;
          w.imm = encode_imm(ImmKind::data, static_cast<uint32_t>(plan.pieces.size() - 1), seq);
          w.send_seq = seq;
          fwd_[p.qp].push_back(std::move(w));
        }
        m.writes_left = static_cast<uint32_t>(plan.pieces.size());
      }
      send_.sent(d);
    }
  }

  // One lane's oldest write lands; its immediate (if any) becomes a completion for later.
  void deliver(std::vector<std::deque<Write>>& lanes, std::deque<Cqe>& cq) {
    auto& lane = lanes[rng_() % lanes.size()];
    if (lane.empty()) return;
    Write w = std::move(lane.front());
    lane.pop_front();
    if (!w.payload.empty()) std::memcpy(w.target, w.payload.data(), w.payload.size());
    if (&lanes == &fwd_ && w.send_seq != kNoMessage) {
      Message& m = messages_[w.send_seq];
      if (--m.writes_left == 0) {
        ++sends_done_;
        if (m.eager_slot >= 0) send_.staging_free(static_cast<uint32_t>(m.eager_slot));
      }
    }
    if (w.has_imm) cq.push_back(Cqe{w.imm, w.payload.size()});
  }

  void process_receiver_cq() {
    if (receiver_cq_.empty()) return;
    const Cqe c = receiver_cq_.front();
    receiver_cq_.pop_front();
    const Imm imm = decode_imm(c.imm);
    if (imm.kind == ImmKind::cts) {
      ASSERT_EQ(imm.aux, kImmAuxRts);
      hold_.requested(widen_seq(imm.seq, recv_.completed()));
      return;
    }
    Status st = recv_.on_imm(decode_imm(c.imm), c.bytes);
    ASSERT_TRUE(st.is_ok()) << st.message();
  }

  void process_sender_cq() {
    if (sender_cq_.empty()) return;
    const Cqe c = sender_cq_.front();
    sender_cq_.pop_front();
    const Imm imm = decode_imm(c.imm);
    ASSERT_EQ(imm.kind, ImmKind::cts);
    send_.on_cts(decode_cts(cts_ring_.data() + (imm.seq % kCtsEntries) * kCtsEntryBytes), imm.seq);
  }

  static constexpr size_t kRoomy = 65600;
  static constexpr uint64_t kNoMessage = ~uint64_t{0};

  uint32_t nqps_;
  std::mt19937_64 rng_;
  std::vector<std::deque<Write>> fwd_, back_;
  std::deque<Cqe> receiver_cq_, sender_cq_;
  RecvLedger recv_;
  SendLedger send_;
  Bytes cts_ring_ = Bytes(kCtsEntries * kCtsEntryBytes);
  Bytes eager_ring_ = Bytes(size_t{kEagerSlots} * kEagerSlotBytes);
  std::deque<Message> messages_;
  std::deque<Bytes> buffers_;
  size_t posted_recvs_ = 0, received_ = 0, sends_done_ = 0, eager_ = 0, too_large_ = 0;
  bool hold_cts_, one_at_a_time_;
  CtsHold hold_;
  uint64_t consumed_reported_ = 0, asked_upto_ = 0;
  size_t cts_ = 0, rts_ = 0;
};

TEST(IbCredits, EveryMessageLandsInItsReceiveInOrder) {
  for (uint32_t nqps : {1u, 4u}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE(::testing::Message() << "nqps " << nqps << " seed " << seed);
      Pair p(nqps, seed);
      p.run(1500);
      if (HasFatalFailure()) return;
      EXPECT_GT(p.eager_count(), 0u);
      EXPECT_GT(p.too_large_count(), 0u);
    }
  }
}

// The receiver holds CTS entries back and no time passes: only the sender's requests release
// them. Every message must still land, and most small ones must have gone without a CTS.
TEST(IbCredits, HeldBackCtsIsReleasedByTheSendersRequest) {
  for (uint32_t nqps : {1u, 4u}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      SCOPED_TRACE(::testing::Message() << "nqps " << nqps << " seed " << seed);
      const bool one_at_a_time = seed % 2 == 0;
      Pair held(nqps, seed, true, one_at_a_time), plain(nqps, seed, false, one_at_a_time);
      held.run(1500);
      if (HasFatalFailure()) return;
      plain.run(1500);
      if (HasFatalFailure()) return;
      EXPECT_GT(held.rts_count(), 0u);
      EXPECT_GT(held.too_large_count(), 0u);
      if (one_at_a_time) {
        EXPECT_LT(held.cts_count(), plain.cts_count());  // some eager messages took none
      } else {
        EXPECT_LE(held.cts_count(), plain.cts_count());
      }
    }
  }
}

// A message waits either on the peer (no CTS for a rendezvous message, or no eager credit: it
// must ask, cts_hold.h) or on itself (its eager staging copy is still being written).
TEST(IbCredits, AWaitSaysWhetherOnlyTheReceiversCtsCanEndIt) {
  SendLedger s;
  const auto d = s.decide(kEagerSlotBytes + 1, true);
  EXPECT_EQ(d.way, SendLedger::Way::wait);
  EXPECT_TRUE(d.needs_cts);
  for (uint32_t i = 0; i < kEagerSlots; ++i) s.sent(s.decide(10, true));  // staging copies busy
  EXPECT_EQ(s.decide(10, true).way, SendLedger::Way::wait);
  s.on_cts(CtsEntry{0x1000, 10, 1, kEagerSlots + 5, 1}, kEagerSlots + 5);  // a later receive's CTS: 1 consumed
  const auto local = s.decide(10, true);
  EXPECT_EQ(local.way, SendLedger::Way::wait);
  EXPECT_FALSE(local.needs_cts);  // slot 0's staging copy is still in flight: its completion frees it
  s.staging_free(0);
  EXPECT_EQ(s.decide(10, true).way, SendLedger::Way::eager);
}

TEST(IbCredits, ReceiverRefusesImmediatesOutsideItsWindow) {
  RecvLedger r;
  std::vector<uint8_t> buf(16);
  r.post(buf.data(), buf.size(), 0);
  // A rendezvous write for a receive never advertised.
  EXPECT_EQ(r.on_imm(Imm{ImmKind::data, 0, 0}, 4).code(), ErrorCode::protocol);
  // An eager message in a slot outside the ring, or far ahead of the receives.
  EXPECT_EQ(r.on_imm(Imm{ImmKind::eager, kEagerSlots, 0}, 4).code(), ErrorCode::protocol);
  EXPECT_EQ(r.on_imm(Imm{ImmKind::eager, 0, 1 + kEagerSlots}, 4).code(), ErrorCode::protocol);
  // The same eager message twice.
  EXPECT_TRUE(r.on_imm(Imm{ImmKind::eager, 0, 0}, 4).is_ok());
  EXPECT_EQ(r.on_imm(Imm{ImmKind::eager, 1, 0}, 4).code(), ErrorCode::protocol);
}

// The refusal names the message (its full sequence number) and what was wrong with it: the
// name is built only on this path, not for every immediate.
TEST(IbCredits, ARefusedImmediateNamesItsMessage) {
  RecvLedger r;
  std::vector<uint8_t> buf(16);
  r.post(buf.data(), buf.size(), 0);
  const Status never = r.on_imm(Imm{ImmKind::data, 0, 0}, 4);
  EXPECT_NE(never.message().find("a write for message 0, whose receive was never advertised"), std::string::npos)
      << never.message();
  const Status slot = r.on_imm(Imm{ImmKind::eager, kEagerSlots, 3}, 4);
  EXPECT_NE(slot.message().find("an eager message 3 in slot 64 of 4 bytes"), std::string::npos) << slot.message();
  const Status ahead = r.on_imm(Imm{ImmKind::eager, 0, 1 + kEagerSlots}, 4);
  EXPECT_NE(ahead.message().find("an eager message 65 far ahead"), std::string::npos) << ahead.message();
  ASSERT_TRUE(r.on_imm(Imm{ImmKind::eager, 0, 0}, 4).is_ok());
  const Status twice = r.on_imm(Imm{ImmKind::eager, 1, 0}, 4);
  EXPECT_NE(twice.message().find("a second copy of message 0"), std::string::npos) << twice.message();
}

TEST(IbCredits, AdvertisingStopsAtTheRingsLength) {
  RecvLedger r;
  std::vector<uint8_t> buf(1);
  for (uint32_t i = 0; i < kCtsEntries + 5; ++i) r.post(buf.data(), 1, i);
  uint32_t advertised = 0;
  while (RecvLedger::Receive* x = r.next_to_advertise()) {
    r.advertised(*x);
    ++advertised;
  }
  EXPECT_EQ(advertised, kCtsEntries);
}

TEST(IbCredits, SenderIgnoresStaleAndObsoleteEntries) {
  SendLedger s;
  CtsEntry e{0x1000, 100, 1, 0, 0};
  s.on_cts(e, 1);  // the slot holds entry 0 but the immediate announced 1: stale
  EXPECT_EQ(s.decide(5000 * 10, false).way, SendLedger::Way::wait);
  s.on_cts(e, 0);
  EXPECT_EQ(s.decide(50, false).way, SendLedger::Way::rendezvous);
  EXPECT_EQ(s.decide(500, false).way, SendLedger::Way::too_large);
  s.sent(s.decide(50, false));
  s.on_cts(e, 0);  // message 0 is gone: obsolete
  EXPECT_EQ(s.decide(50, false).way, SendLedger::Way::wait);
}

// A whole ring of entries ahead of the sender: each message takes its own receive's entry,
// also after the ring's slots were reused for later receives.
TEST(IbCredits, EachMessageTakesItsOwnReceivesEntry) {
  SendLedger s;
  uint32_t next_entry = 0;
  const auto advertise = [&](uint32_t upto) {
    for (; next_entry < upto; ++next_entry) {
      s.on_cts(CtsEntry{0x100000 + uint64_t{next_entry} * 64, 64, next_entry, next_entry, 0}, next_entry & kImmSeqMask);
    }
  };
  advertise(kCtsEntries);
  for (uint32_t m = 0; m < 3 * kCtsEntries; ++m) {
    const auto d = s.decide(64, false);
    ASSERT_EQ(d.way, SendLedger::Way::rendezvous) << "message " << m;
    EXPECT_EQ(d.cts.addr, 0x100000 + uint64_t{m} * 64) << "message " << m;
    EXPECT_EQ(d.cts.rkey, m);
    s.sent(d);
    EXPECT_EQ(s.decide(64, false).way, m + 1 < next_entry ? SendLedger::Way::rendezvous : SendLedger::Way::wait);
    advertise(m + 1 + kCtsEntries);  // receive m completed: the receiver may advertise one more
  }
  // Early eager messages are kept per seq too: a receive posted later takes its own.
  RecvLedger r;
  std::vector<uint8_t> buf(16);
  for (uint32_t round = 0; round < 3; ++round) {
    const uint32_t base = round * kEagerSlots;
    for (uint32_t i = 0; i < kEagerSlots; ++i) {
      ASSERT_TRUE(r.on_imm(Imm{ImmKind::eager, (i + round) % kEagerSlots, base + i}, i % 9).is_ok());
    }
    for (uint32_t i = 0; i < kEagerSlots; ++i) {
      RecvLedger::Receive& x = r.post(buf.data(), buf.size(), i);
      EXPECT_EQ(x.seq, base + i);
      EXPECT_EQ(x.eager_slot, static_cast<int>((i + round) % kEagerSlots));
      EXPECT_EQ(x.bytes, i % 9);
      ASSERT_EQ(r.front_ready(), &x);
      r.pop_front();
    }
    EXPECT_FALSE(r.next_arrived());
  }
}

TEST(IbCredits, EagerCreditsRunOutUntilTheReceiverReportsConsumption) {
  SendLedger s;
  for (uint32_t i = 0; i < kEagerSlots; ++i) {
    auto d = s.decide(10, true);
    ASSERT_EQ(d.way, SendLedger::Way::eager);
    s.sent(d);
    s.staging_free(d.eager_slot);
  }
  EXPECT_EQ(s.decide(10, true).way, SendLedger::Way::wait);
  EXPECT_TRUE(s.decide(10, true).needs_cts);  // only a CTS can bring credits: the sender asks
  // The CTS of the next receive reports 3 eager messages copied out.
  s.on_cts(CtsEntry{0x1000, 10, 1, kEagerSlots, 3}, kEagerSlots);
  EXPECT_EQ(s.decide(10, true).way, SendLedger::Way::eager);
}

}  // namespace
}  // namespace braid::transport::ib
