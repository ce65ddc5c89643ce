// The ib connection card, clear-to-send entries and immediates (transport/ib/ib_wire.h): round
// trips, every check of the card's decoder, and a seeded fuzz of the decoder with mutations
// aimed at its fields (a card comes from the network: nothing it holds may crash the decoder or
// slip through with a field the data path would trust out of range).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "transport/ib/ib_wire.h"

namespace braid::transport::ib {
namespace {

ConnectionCard sample_card(uint16_t nqps = 4) {
  ConnectionCard c;
  c.nqps = nqps;
  c.lid = 0;
  c.mtu_bytes = 1024;
  for (size_t i = 0; i < 16; ++i) c.gid[i] = static_cast<uint8_t>(i * 7);
  c.cts_addr = 0x7f0000001000;
  c.cts_rkey = 0x1234;
  c.cts_entries = kCtsEntries;
  c.eager_addr = 0x7f0000100000;
  c.eager_rkey = 0x5678;
  c.eager_slots = kEagerSlots;
  c.eager_slot_bytes = kEagerSlotBytes;
  for (uint16_t i = 0; i < nqps; ++i) c.qps[i] = QpAddress{100u + i, 0xabcdeu + i};
  return c;
}

TEST(IbWire, CardRoundTrips) {
  unsigned char b[kCardBytes];
  const ConnectionCard c = sample_card(kMaxQps);
  encode(c, b);
  auto d = decode_card(b);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->nqps, c.nqps);
  EXPECT_EQ(d->mtu_bytes, c.mtu_bytes);
  EXPECT_EQ(d->gid, c.gid);
  EXPECT_EQ(d->cts_addr, c.cts_addr);
  EXPECT_EQ(d->cts_rkey, c.cts_rkey);
  EXPECT_EQ(d->eager_addr, c.eager_addr);
  EXPECT_EQ(d->eager_rkey, c.eager_rkey);
  for (size_t i = 0; i < kMaxQps; ++i) {
    EXPECT_EQ(d->qps[i].qpn, c.qps[i].qpn);
    EXPECT_EQ(d->qps[i].psn, c.qps[i].psn);
  }
}

// Each way a peer's card can be wrong, with the words its message must carry.
TEST(IbWire, BadCardsAreRefusedSayingWhy) {
  struct Case {
    const char* what;
    void (*spoil)(unsigned char*);
    const char* expect;
  };
  const Case cases[] = {
      {"magic", [](unsigned char* b) { b[0] ^= 1; }, "wrong magic"},
      {"version", [](unsigned char* b) { b[4] = 9; }, "version 9"},
      {"no QPs", [](unsigned char* b) { b[6] = 0, b[7] = 0; }, "0 QPs"},
      {"too many QPs", [](unsigned char* b) { b[6] = 65, b[7] = 0; }, "65 QPs"},
      {"MTU", [](unsigned char* b) { b[12] = 0, b[13] = 3; }, "MTU 768"},
      {"ring", [](unsigned char* b) { b[44] = 7; }, "ring shapes"},
      {"eager slot size", [](unsigned char* b) { b[65] = 0x40; }, "ring shapes"},
      {"null ring", [](unsigned char* b) { std::memset(b + 48, 0, 8); }, "null"},
      {"QP number 0", [](unsigned char* b) { std::memset(b + 72 + 8, 0, 4); }, "QP 1 has number 0"},
      {"PSN wider than 24 bits", [](unsigned char* b) { b[76 + 3] = 1; }, "QP 0"},
  };
  for (const Case& c : cases) {
    unsigned char b[kCardBytes];
    encode(sample_card(), b);
    c.spoil(b);
    auto d = decode_card(b);
    ASSERT_FALSE(d.is_ok()) << c.what;
    EXPECT_EQ(d.status().code(), ErrorCode::protocol) << c.what;
    EXPECT_NE(d.status().message().find(c.expect), std::string::npos) << c.what << ": " << d.status().message();
  }
}

// QPs beyond nqps are not looked at: a card with 1 QP may leave the rest zero.
TEST(IbWire, UnusedQpSlotsAreIgnored) {
  unsigned char b[kCardBytes];
  ConnectionCard c = sample_card(1);
  encode(c, b);
  EXPECT_TRUE(decode_card(b).is_ok());
}

TEST(IbWire, FuzzedCardsNeverPassOutOfRange) {
  std::mt19937_64 rng(20261125);
  const std::vector<std::pair<size_t, size_t>> fields = {{0, 4},  {4, 2},  {6, 2},  {8, 2},  {12, 4}, {32, 8},
                                                          {40, 4}, {44, 4}, {48, 8}, {56, 4}, {60, 2}, {64, 4},
                                                          {72, 4}, {76, 4}, {80, 4}, {84, 4}};
  const uint64_t interesting[] = {0, 1, 2, 15, 16, 17, 63, 64, 65, 255, 256, 1024, 4096, 8192, 0xffff, 0xffffff,
                                  0x1000000, 0xffffffff, ~0ull};
  size_t accepted = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    unsigned char b[kCardBytes];
    encode(sample_card(static_cast<uint16_t>(1 + rng() % 4)), b);
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      if (rng() % 4 == 0) {
        b[rng() % kCardBytes] = static_cast<unsigned char>(rng());
      } else {
        const auto& [at, width] = fields[rng() % fields.size()];
        const uint64_t v = interesting[rng() % std::size(interesting)];
        std::memcpy(b + at, &v, width);
      }
    }
    auto d = decode_card(b);
    if (!d.is_ok()) {
      EXPECT_EQ(d.status().code(), ErrorCode::protocol);
      continue;
    }
    ++accepted;
    ASSERT_GE(d->nqps, 1);
    ASSERT_LE(d->nqps, kMaxQps);
    ASSERT_TRUE(valid_mtu_bytes(d->mtu_bytes));
    ASSERT_EQ(d->cts_entries, kCtsEntries);
    ASSERT_EQ(d->eager_slots, kEagerSlots);
    ASSERT_EQ(d->eager_slot_bytes, kEagerSlotBytes);
    for (size_t i = 0; i < d->nqps; ++i) {
      ASSERT_NE(d->qps[i].qpn, 0u);
      ASSERT_LE(d->qps[i].qpn, kImmSeqMask);
      ASSERT_LE(d->qps[i].psn, kImmSeqMask);
    }
  }
  EXPECT_GT(accepted, 0u);  // some mutations are harmless (a GID byte, an unused QP slot)
}

TEST(IbWire, CtsEntryRoundTrips) {
  CtsEntry e{0x7fff12345678, (uint64_t{5} << 32) + 3, 0xdeadbeef, 0xfffffffe, 77};
  unsigned char b[kCtsEntryBytes];
  encode(e, b);
  const CtsEntry d = decode_cts(b);
  EXPECT_EQ(d.addr, e.addr);
  EXPECT_EQ(d.size, e.size);
  EXPECT_EQ(d.rkey, e.rkey);
  EXPECT_EQ(d.seq, e.seq);
  EXPECT_EQ(d.eager_consumed, e.eager_consumed);
}

TEST(IbWire, ImmediateCarriesKindAuxAndSeq) {
  for (ImmKind k : {ImmKind::data, ImmKind::eager, ImmKind::cts, ImmKind::too_large}) {
    for (uint32_t aux : {0u, 1u, 15u, kImmAuxMax}) {
      for (uint64_t seq : {uint64_t{0}, uint64_t{1}, uint64_t{kImmSeqMask}, uint64_t{kImmSeqMask} + 5}) {
        const Imm i = decode_imm(encode_imm(k, aux, seq));
        EXPECT_EQ(i.kind, k);
        EXPECT_EQ(i.aux, aux);
        EXPECT_EQ(i.seq, seq & kImmSeqMask);
      }
    }
  }
}

TEST(IbWire, SequenceNumbersWidenAcrossTheWrap) {
  EXPECT_EQ(widen_seq(5, 0), 5u);
  EXPECT_EQ(widen_seq(5, 5), 5u);
  const uint64_t base = (uint64_t{3} << kImmSeqBits) - 10;  // 10 below a wrap
  EXPECT_EQ(widen_seq(static_cast<uint32_t>((base + 20) & kImmSeqMask), base), base + 20);
  EXPECT_EQ(widen_seq(static_cast<uint32_t>(base & kImmSeqMask), base), base);
}

}  // namespace
}  // namespace braid::transport::ib
