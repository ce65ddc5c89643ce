#include "transport/ib/ib_wire.h"

#include <cstring>

namespace braid::transport::ib {

namespace {

template <typename T>
void put(unsigned char* out, size_t at, T v) {
  std::memcpy(out + at, &v, sizeof v);
}

template <typename T>
T get(const unsigned char* in, size_t at) {
  T v;
  std::memcpy(&v, in + at, sizeof v);
  return v;
}

std::string card_error(const std::string& what) {
  return "bad ib connection card from the peer: " + what + " (another braid version, or not a braid rank?)";
}

}  // namespace

bool valid_mtu_bytes(uint32_t bytes) {
  return bytes == 256 || bytes == 512 || bytes == 1024 || bytes == 2048 || bytes == 4096;
}

void encode(const ConnectionCard& c, unsigned char out[kCardBytes]) {
  std::memset(out, 0, kCardBytes);
  put<uint32_t>(out, 0, kCardMagic);
  put<uint16_t>(out, 4, kCardVersion);
  put<uint16_t>(out, 6, c.nqps);
  put<uint16_t>(out, 8, c.lid);
  put<uint32_t>(out, 12, c.mtu_bytes);
  std::memcpy(out + 16, c.gid.data(), c.gid.size());
  put<uint64_t>(out, 32, c.cts_addr);
  put<uint32_t>(out, 40, c.cts_rkey);
  put<uint32_t>(out, 44, c.cts_entries);
  put<uint64_t>(out, 48, c.eager_addr);
  put<uint32_t>(out, 56, c.eager_rkey);
  put<uint16_t>(out, 60, c.eager_slots);
  put<uint32_t>(out, 64, c.eager_slot_bytes);
  for (size_t i = 0; i < kMaxQps; ++i) {
    put<uint32_t>(out, 72 + 8 * i, c.qps[i].qpn);
    put<uint32_t>(out, 76 + 8 * i, c.qps[i].psn);
  }
}

Result<ConnectionCard> decode_card(const unsigned char in[kCardBytes]) {
  if (get<uint32_t>(in, 0) != kCardMagic) return protocol_error(card_error("wrong magic"));
  const uint16_t version = get<uint16_t>(in, 4);
  if (version != kCardVersion) {
    return protocol_error(card_error("version " + std::to_string(version) + ", this build speaks " +
                                     std::to_string(kCardVersion)));
  }
  ConnectionCard c;
  c.nqps = get<uint16_t>(in, 6);
  c.lid = get<uint16_t>(in, 8);
  c.mtu_bytes = get<uint32_t>(in, 12);
  std::memcpy(c.gid.data(), in + 16, c.gid.size());
  c.cts_addr = get<uint64_t>(in, 32);
  c.cts_rkey = get<uint32_t>(in, 40);
  c.cts_entries = get<uint32_t>(in, 44);
  c.eager_addr = get<uint64_t>(in, 48);
  c.eager_rkey = get<uint32_t>(in, 56);
  c.eager_slots = get<uint16_t>(in, 60);
  c.eager_slot_bytes = get<uint32_t>(in, 64);
  if (c.nqps < 1 || c.nqps > kMaxQps) {
    return protocol_error(card_error(std::to_string(c.nqps) + " QPs (1.." + std::to_string(kMaxQps) + " allowed)"));
  }
  if (!valid_mtu_bytes(c.mtu_bytes)) return protocol_error(card_error("MTU " + std::to_string(c.mtu_bytes)));
  // Both ends are built with the same ring shapes; a peer with others would write out of bounds.
  if (c.cts_entries != kCtsEntries || c.eager_slots != kEagerSlots || c.eager_slot_bytes != kEagerSlotBytes) {
    return protocol_error(card_error("ring shapes " + std::to_string(c.cts_entries) + "/" +
                                     std::to_string(c.eager_slots) + "x" + std::to_string(c.eager_slot_bytes) +
                                     ", expected " + std::to_string(kCtsEntries) + "/" + std::to_string(kEagerSlots) +
                                     "x" + std::to_string(kEagerSlotBytes)));
  }
  if (c.cts_addr == 0 || c.eager_addr == 0) return protocol_error(card_error("a ring address is null"));
  for (size_t i = 0; i < kMaxQps; ++i) {
    c.qps[i].qpn = get<uint32_t>(in, 72 + 8 * i);
    c.qps[i].psn = get<uint32_t>(in, 76 + 8 * i);
    if (i >= c.nqps) continue;
    if (c.qps[i].qpn == 0 || c.qps[i].qpn > kImmSeqMask || c.qps[i].psn > kImmSeqMask) {
      return protocol_error(card_error("QP " + std::to_string(i) + " has number " + std::to_string(c.qps[i].qpn) +
                                       " and PSN " + std::to_string(c.qps[i].psn) + " (24 bits each, number not 0)"));
    }
  }
  return c;
}

void encode(const CtsEntry& e, unsigned char out[kCtsEntryBytes]) {
  put<uint64_t>(out, 0, e.addr);
  put<uint64_t>(out, 8, e.size);
  put<uint32_t>(out, 16, e.rkey);
  put<uint32_t>(out, 20, e.seq);
  put<uint64_t>(out, 24, e.eager_consumed);
}

CtsEntry decode_cts(const unsigned char in[kCtsEntryBytes]) {
  CtsEntry e;
  e.addr = get<uint64_t>(in, 0);
  e.size = get<uint64_t>(in, 8);
  e.rkey = get<uint32_t>(in, 16);
  e.seq = get<uint32_t>(in, 20);
  e.eager_consumed = get<uint64_t>(in, 24);
  return e;
}

}  // namespace braid::transport::ib
