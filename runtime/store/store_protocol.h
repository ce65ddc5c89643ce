// runtime/store/store_protocol.h - the bytes a TcpStore client and its server exchange.
//
// Every message, either way, is one frame:
//
//   u32 body_len (little endian) | body (body_len bytes)
//
// body_len <= the server's limit (BRAID_STORE_MAX_FRAME_BYTES, default 4 MiB, never above
// kMaxFrameBytes = 64 MiB). A longer length is answered with an `error` reply and the connection
// is closed, before any of the body is buffered: once a length is untrusted, no later byte can
// be trusted to start a frame.
//
// Field encodings inside a body (all integers little endian):
//   bytes = u32 len | len bytes        binary-safe: keys and values may hold NUL bytes
//   i64   = 8 bytes, two's complement
//   keys  = u32 count | count x bytes
//   raw N = N bytes as they are (nonces and proofs)
//
// ---- Handshake (common/job_secret.h has the challenge-response) ----
//
// Before anything else, each connection proves that both ends belong to the same job. Three
// frames, each body at most kMaxHandshakeBytes:
//
//   server -> client  hello:   u32 magic "BRST" | u16 version (1) | u8 flags | raw 32 server nonce |
//                              server job id:bytes
//   client -> server  answer:  u32 magic "BRST" | u16 version | u8 flags | raw 32 client nonce |
//                              raw 32 proof | client job id:bytes
//   server -> client  verdict: ok | raw 32 server proof     (the reply kinds below)
//                          or  error | u8 ErrorCode | message:bytes, then the server closes
//
//   flags bit 0: the sender has the job's secret (only for clearer messages: a side without one
//   proves with the all-zero key and simply fails against a side that has one).
//   Job ids are at most kMaxJobIdBytes; empty means "unknown" and is never compared.
//   proof  = JobSecret::prove(to_acceptor, server nonce, client nonce, transcript)
//   server proof = JobSecret::prove(to_connector, client nonce, server nonce, transcript)
//   transcript = "braid-store/1" | 0x00 | server job id | 0x00 | client job id
//
// The server refuses (error, then close) an answer that is malformed, too long, late (its
// handshake deadline, ~2 s, runs from the accept), whose proof is wrong, or whose job id is set
// and differs from its own (ErrorCode::invalid_argument: two jobs given one port). The client
// refuses a server whose hello is not a braid store's, whose job id differs from its own, or
// whose proof is wrong. Until the verdict the server reads nothing else from the connection.
//
// ---- Requests (after the handshake) ----
//
// Request body = u8 opcode | fields. The client sends one request and reads its reply before
// sending the next; the server answers requests of one connection in order.
//
//   opcode          fields                               replies
//   1 set           key:bytes value:bytes                ok
//   2 get           key:bytes timeout_ms:i64             value | timed_out
//   3 add           key:bytes delta:i64                  integer | error
//   4 compare_set   key:bytes expected:bytes desired:bytes  value
//   5 wait          keys timeout_ms:i64                  ok | timed_out
//   6 check         keys                                 boolean
//   7 delete_key    key:bytes                            boolean
//   8 num_keys      -                                    integer
//
// get and wait carry their timeout: the server keeps the waiter and answers `timed_out` itself
// when it expires, so a wait that times out leaves the connection in step and usable.
//
// Reply body = u8 kind | payload:
//
//   kind          payload
//   0 ok          -
//   1 value       bytes
//   2 integer     i64
//   3 boolean     u8 (0 | 1)
//   4 timed_out   keys (those still missing when the wait expired)
//   5 error       u8 braid::ErrorCode | message:bytes (text for humans)
//
// Any request the server cannot parse (unknown opcode, truncated or trailing fields) gets an
// `error` reply with ErrorCode::protocol; the connection stays open since the framing is intact.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace braid::store {

inline constexpr size_t kFrameHeaderBytes = 4;
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;
inline constexpr uint32_t kHandshakeMagic = 0x54535242;  // "BRST" as little-endian bytes
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kMaxHandshakeBytes = 512;
inline constexpr size_t kMaxJobIdBytes = 256;

enum class Opcode : uint8_t {
  set = 1,
  get = 2,
  add = 3,
  compare_set = 4,
  wait = 5,
  check = 6,
  delete_key = 7,
  num_keys = 8,
};

enum class ReplyKind : uint8_t {
  ok = 0,
  value = 1,
  integer = 2,
  boolean = 3,
  timed_out = 4,
  error = 5,
};

// Builds one frame; the length prefix is filled in by finish().
class FrameWriter {
 public:
  FrameWriter() { buf_.resize(kFrameHeaderBytes); }
  FrameWriter& u8(uint8_t v) {
    buf_.push_back(static_cast<char>(v));
    return *this;
  }
  FrameWriter& u16(uint16_t v) {
    buf_.push_back(static_cast<char>(v & 0xff));
    buf_.push_back(static_cast<char>(v >> 8));
    return *this;
  }
  FrameWriter& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  FrameWriter& i64(int64_t v) {
    auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    return *this;
  }
  FrameWriter& bytes(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    buf_.append(s.data(), s.size());
    return *this;
  }
  FrameWriter& raw(std::string_view s) {
    buf_.append(s.data(), s.size());
    return *this;
  }
  FrameWriter& keys(const std::vector<std::string>& ks) {
    u32(static_cast<uint32_t>(ks.size()));
    for (const auto& k : ks) bytes(k);
    return *this;
  }
  // The whole frame, length prefix included; call once, last (the writer gives its buffer away).
  std::string finish() {
    uint32_t len = static_cast<uint32_t>(buf_.size() - kFrameHeaderBytes);
    for (int i = 0; i < 4; ++i) buf_[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    return std::move(buf_);
  }

 private:
  std::string buf_;
};

inline uint32_t decode_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Reads fields from a frame body. Every getter returns false once the body runs short, and
// stays false: callers check ok() (and at_end()) once after reading all fields.
class FrameReader {
 public:
  explicit FrameReader(std::string_view body) : rest_(body) {}
  bool ok() const { return ok_; }
  bool at_end() const { return rest_.empty(); }

  uint8_t u8() {
    if (!need(1)) return 0;
    auto v = static_cast<uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return v;
  }
  uint16_t u16() {
    if (!need(2)) return 0;
    auto v = static_cast<uint16_t>(static_cast<uint8_t>(rest_[0]) | (static_cast<uint8_t>(rest_[1]) << 8));
    rest_.remove_prefix(2);
    return v;
  }
  uint32_t u32() {
    if (!need(4)) return 0;
    uint32_t v = decode_u32(rest_.data());
    rest_.remove_prefix(4);
    return v;
  }
  int64_t i64() {
    if (!need(8)) return 0;
    uint64_t u = 0;
    for (int i = 7; i >= 0; --i) u = (u << 8) | static_cast<uint8_t>(rest_[i]);
    rest_.remove_prefix(8);
    return static_cast<int64_t>(u);
  }
  std::string bytes() {
    uint32_t len = u32();
    if (!need(len)) return {};
    std::string s(rest_.substr(0, len));
    rest_.remove_prefix(len);
    return s;
  }
  // Exactly n bytes (a nonce, a proof); copied into `out`.
  void raw(unsigned char* out, size_t n) {
    if (!need(n)) return;
    std::memcpy(out, rest_.data(), n);
    rest_.remove_prefix(n);
  }
  std::vector<std::string> keys() {
    uint32_t n = u32();
    std::vector<std::string> ks;
    // Each key takes at least 4 bytes, so a count larger than that is a lie: refuse it before
    // reserving memory for it.
    if (!need(size_t{n} * 4)) return ks;
    ks.reserve(n);
    for (uint32_t i = 0; i < n && ok_; ++i) ks.push_back(bytes());
    return ks;
  }

 private:
  // Only checks that n bytes remain; the getters consume.
  bool need(size_t n) {
    if (ok_ && rest_.size() >= n) return true;
    ok_ = false;
    rest_ = {};
    return false;
  }
  std::string_view rest_;
  bool ok_ = true;
};

}  // namespace braid::store
