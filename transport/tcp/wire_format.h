// transport/tcp/wire_format.h - the bytes a tcp connection carries.
//
// Every integer is little-endian (the only byte order braid runs on; checked below).
//
// Handshake: the connector writes one per socket right after connect(); the acceptor reads it
// (bounded by kHandshakeTimeout) and refuses the socket when anything is off. Every version
// starts with magic and version, so the acceptor reads those kHandshakePrefixBytes first and
// refuses another version (with its reason in the log) before waiting for a body whose size
// it does not know. The acceptor answers each handshake it accepts with its own (ranks
// swapped, the same comm_id, nsocks and socket_index), written before any frame on that socket.
// The connector never waits for that answer (so "rank r connects to higher ranks, accepts from
// lower ones" in sequence cannot deadlock): it reads it as the first bytes of the socket, when
// it first wants to receive, and fails the connection when it does not match.
//
//   offset size field
//   0      4    magic        kHandshakeMagic ("BRDH")
//   4      2    version      kProtocolVersion
//   6      2    nsocks       sockets of this connection, 1..kMaxSockets
//   8      8    comm_id      the communicator both ends belong to
//   16     4    from_rank    the sending rank
//   20     4    to_rank      the rank it means to reach
//   24     2    socket_index 0..nsocks-1: which stripe this socket is
//   26     6    reserved     zero
//   32     16   boot_id      the sender's kernel boot id (host_identity.h); zero: unknown
//   48     128  cpu_mask     the sender's CPU affinity, bit c = CPU c, CPUs 0..1023; zero: unknown
//   176         (total)
// Version 1 ended at offset 32 (no host identity, no answer).
//
// Data: a message of total_len bytes is sent as one or more frames, each a header followed by
// slice_len payload bytes. Small messages are one frame on socket (seq % nsocks); large ones are
// cut into nsocks contiguous slices, slice k on socket (seq + k) % nsocks. Frames of a socket
// follow the message order, so a receiver matches frames to posted receives by seq and lands
// each slice at its offset in the posted buffer, with no intermediate copy (but for small
// messages, read together with their headers: tcp_stream.h).
//
//   offset size field
//   0      2    magic        kFrameMagic
//   2      1    type         FrameType
//   3      1    reserved     zero
//   4      4    slice_len    payload bytes that follow this header
//   8      8    seq          the message's number on this connection (0, 1, 2, ...)
//   16     8    total_len    the whole message's length
//   24     8    offset       where this slice starts inside the message
//   32          (total)
#pragma once

#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/tcp/host_identity.h"

namespace braid::transport::tcp {

static_assert(std::endian::native == std::endian::little, "braid's wire format assumes a little-endian host");

inline constexpr uint32_t kHandshakeMagic = 0x48445242;  // "BRDH"
inline constexpr uint16_t kProtocolVersion = 2;
inline constexpr uint16_t kFrameMagic = 0xB7AD;
inline constexpr size_t kHandshakePrefixBytes = 8;  // magic, version, nsocks
inline constexpr size_t kHandshakeBytes = 176;
inline constexpr size_t kFrameHeaderBytes = 32;
inline constexpr int kMaxSockets = 64;
// A stranger that connects and sends nothing must not stall the listener for long.
inline constexpr std::chrono::milliseconds kHandshakeTimeout{2000};

enum class FrameType : uint8_t { data = 1 };

struct Handshake {
  uint32_t magic = kHandshakeMagic;
  uint16_t version = kProtocolVersion;
  uint16_t nsocks = 1;
  uint64_t comm_id = 0;
  int32_t from_rank = 0;
  int32_t to_rank = 0;
  uint16_t socket_index = 0;
  uint8_t reserved[6] = {};
  BootId boot_id{};
  CpuMask cpu_mask{};
};
static_assert(sizeof(Handshake) == kHandshakeBytes);
static_assert(offsetof(Handshake, boot_id) == 32 && offsetof(Handshake, cpu_mask) == 48);

struct FrameHeader {
  uint16_t magic = kFrameMagic;
  FrameType type = FrameType::data;
  uint8_t reserved = 0;
  uint32_t slice_len = 0;
  uint64_t seq = 0;
  uint64_t total_len = 0;
  uint64_t offset = 0;
};
static_assert(sizeof(FrameHeader) == kFrameHeaderBytes);

// The structs above have no padding and the host is little-endian, so encoding is a copy.
inline void encode(const Handshake& h, unsigned char* out) { std::memcpy(out, &h, sizeof h); }
inline Handshake decode_handshake(const unsigned char* in) {
  Handshake h;
  std::memcpy(&h, in, sizeof h);
  return h;
}
inline FrameHeader decode_frame(const unsigned char* in) {
  FrameHeader f;
  std::memcpy(&f, in, sizeof f);
  return f;
}

}  // namespace braid::transport::tcp
