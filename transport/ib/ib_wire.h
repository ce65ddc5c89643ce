// transport/ib/ib_wire.h - the bytes an ib connection exchanges: the connection card sent over
// the bootstrap TCP socket, the clear-to-send entries written into the sender's memory, and the
// 32-bit immediate that names each RDMA write.
//
// Every integer is little-endian (checked in transport/common/handshake_format.h).
//
// Setup, on the TCP socket that the authenticated handshake of transport/common/handshake_format.h has
// admitted (nsocks 1): each end sends its card (kCardBytes), reads the peer's, brings its QPs to
// RTS, then sends one byte kReadyByte and waits for the peer's, so no write reaches a QP that is
// not yet ready to receive. Afterwards the socket carries one message at most, the goodbye of an
// end that closes the connection normally: kByeByte, then 8 bytes, the number of messages it
// received whole, then 8 bytes, the number of its messages whose writes it posted. The peer
// completes the sends below the first number (their data arrived; their acknowledgements may
// come after the socket's EOF, or never once the QP is gone) and fails the rest; it takes the
// messages below the second number from its CQ first (their completions may trail the EOF by
// milliseconds on a loaded host). EOF without a goodbye means the peer died: everything
// outstanding fails.
//
// Card:
//   offset size field
//   0      4    magic        kCardMagic ("BRIB")
//   4      2    version      kCardVersion
//   6      2    nqps         QPs of this connection, 1..kMaxQps
//   8      2    lid          the port's LID (InfiniBand; 0 on RoCE)
//   10     2    reserved     zero
//   12     4    mtu_bytes    the port's active MTU: 256, 512, 1024, 2048 or 4096
//   16     16   gid          the chosen GID (all zero on InfiniBand without GRH)
//   32     8    cts_addr     the sender-side clear-to-send ring the peer writes into
//   40     4    cts_rkey
//   44     4    cts_entries  ring length, kCtsEntries
//   48     8    eager_addr   the receive-side eager slots the peer writes small messages into
//   56     4    eager_rkey
//   60     2    eager_slots  kEagerSlots
//   62     2    reserved     zero
//   64     4    eager_slot_bytes  kEagerSlotBytes
//   68     4    reserved     zero
//   72     8*kMaxQps  per QP: qpn (4, 24 bits used), psn (4, 24 bits used)
//   584         (total)
//
// Clear-to-send entry (kCtsEntryBytes), receive r written into slot r % cts_entries:
//   0  8 addr   where message r may be written (0 when size is 0)
//   8  8 size   the receive's capacity in bytes
//   16 4 rkey
//   20 4 seq    r's low 32 bits (the immediate carries only 24; this tells a stale slot apart)
//   24 8 eager_consumed  eager messages this receiver has copied out so far (frees slots)
//   32        (total)
//
// Immediate: bits 31..30 kind, 29..24 aux, 23..0 the message's sequence number modulo 2^24.
//   data      aux = pieces - 1: one write of a rendezvous message into the receive's buffer
//   eager     aux = eager slot
//   cts       aux = 0: a clear-to-send entry was written for receive `seq`
//             aux = 1: a request to send (RTS), zero bytes: message `seq` waits for its receive's
//             clear-to-send, which the receiver may be holding back (cts_hold.h)
//   too_large aux = 0: message `seq` is larger than the buffer its receive advertised
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace braid::transport::ib {

constexpr uint32_t kCardMagic = 0x42495242;  // "BRIB" little-endian
constexpr uint16_t kCardVersion = 1;
constexpr size_t kMaxQps = 64;  // BRAID_IB_QPS_PER_CONNECTION's range
constexpr size_t kCardBytes = 72 + 8 * kMaxQps;
constexpr unsigned char kReadyByte = 0x5a;
constexpr unsigned char kByeByte = 0xb7;
constexpr size_t kByeBytes = 17;

constexpr uint32_t kCtsEntries = 256;  // also the most receives outstanding per connection
constexpr size_t kCtsEntryBytes = 32;
constexpr uint16_t kEagerSlots = 64;
constexpr uint32_t kEagerSlotBytes = 8192;  // the largest eager message

struct QpAddress {
  uint32_t qpn = 0;
  uint32_t psn = 0;
};

struct ConnectionCard {
  uint16_t nqps = 0;
  uint16_t lid = 0;
  uint32_t mtu_bytes = 0;
  std::array<uint8_t, 16> gid{};
  uint64_t cts_addr = 0;
  uint32_t cts_rkey = 0;
  uint32_t cts_entries = 0;
  uint64_t eager_addr = 0;
  uint32_t eager_rkey = 0;
  uint16_t eager_slots = 0;
  uint32_t eager_slot_bytes = 0;
  std::array<QpAddress, kMaxQps> qps{};
};

void encode(const ConnectionCard& card, unsigned char out[kCardBytes]);
// Checks every field a peer could get wrong (magic, version, QP count, MTU, ring shapes, QP
// numbers); the message says which and what was expected. Never reads past kCardBytes.
Result<ConnectionCard> decode_card(const unsigned char in[kCardBytes]);

struct CtsEntry {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint32_t rkey = 0;
  uint32_t seq = 0;
  uint64_t eager_consumed = 0;
};
void encode(const CtsEntry& e, unsigned char out[kCtsEntryBytes]);
CtsEntry decode_cts(const unsigned char in[kCtsEntryBytes]);

enum class ImmKind : uint8_t { data = 0, eager = 1, cts = 2, too_large = 3 };
constexpr uint32_t kImmSeqBits = 24;
constexpr uint32_t kImmSeqMask = (1u << kImmSeqBits) - 1;
constexpr uint32_t kImmAuxMax = 63;
constexpr uint32_t kImmAuxCts = 0;  // with ImmKind::cts: an entry was written
constexpr uint32_t kImmAuxRts = 1;  // with ImmKind::cts: the sender asks for one

struct Imm {
  ImmKind kind = ImmKind::data;
  uint32_t aux = 0;
  uint32_t seq = 0;  // low kImmSeqBits of the sequence number
};
// Inline: every message encodes and decodes one.
inline uint32_t encode_imm(ImmKind kind, uint32_t aux, uint64_t seq) {
  return (static_cast<uint32_t>(kind) << 30) | ((aux & kImmAuxMax) << kImmSeqBits) |
         static_cast<uint32_t>(seq & kImmSeqMask);
}
inline Imm decode_imm(uint32_t imm) {
  return Imm{static_cast<ImmKind>(imm >> 30), (imm >> kImmSeqBits) & kImmAuxMax, imm & kImmSeqMask};
}
// The full sequence number of `low` (kImmSeqBits wide), given that it lies in
// [base, base + 2^kImmSeqBits): the window of messages that may be in flight.
inline uint64_t widen_seq(uint32_t low, uint64_t base) {
  const uint32_t offset = (low - static_cast<uint32_t>(base)) & kImmSeqMask;
  return base + offset;
}

// "1024" for the MTUs verbs knows; 0 for anything else.
bool valid_mtu_bytes(uint32_t bytes);

}  // namespace braid::transport::ib
