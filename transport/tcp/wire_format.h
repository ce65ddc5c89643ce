// transport/tcp/wire_format.h - the bytes a tcp connection carries after its handshake.
//
// Every integer is little-endian (the only byte order braid runs on; checked in
// transport/common/handshake_format.h, which has the handshake every socket starts with).
//
// Data: a message of total_len bytes is sent as one or more frames, each a header followed by
// slice_len payload bytes. Small messages are one frame on socket (seq % nsocks); large ones are
// cut into nsocks contiguous slices, slice k on socket (seq + k) % nsocks. Frames of a socket
// follow the message order, and a socket sees at least every nsocks-th message, so the seq of
// a socket's frames never decreases and never jumps by more than nsocks (its first is below
// nsocks): a receiver refuses any other frame as garbage. It matches frames to posted
// receives by seq and lands each slice at its offset in the posted buffer, with no
// intermediate copy (but for small messages, read together with their headers: tcp_stream.h).
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

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/common/handshake_format.h"

namespace braid::transport::tcp {

inline constexpr uint16_t kFrameMagic = 0xB7AD;
inline constexpr size_t kFrameHeaderBytes = 32;

enum class FrameType : uint8_t { data = 1 };

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

// The struct has no padding and the host is little-endian, so decoding is a copy.
inline FrameHeader decode_frame(const unsigned char* in) {
  FrameHeader f;
  std::memcpy(&f, in, sizeof f);
  return f;
}

}  // namespace braid::transport::tcp
