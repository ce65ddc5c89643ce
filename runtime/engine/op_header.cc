#include "runtime/engine/op_header.h"

#include <bit>
#include <cstring>
#include <sstream>

namespace braid {
namespace {

using collectives::Kind;

bool is_rooted(Kind k) { return k == Kind::broadcast || k == Kind::reduce || k == Kind::gather || k == Kind::scatter; }
bool is_reducing(Kind k) { return k == Kind::all_reduce || k == Kind::reduce || k == Kind::reduce_scatter; }
bool is_p2p(Kind k) { return k == Kind::send || k == Kind::recv; }

// FNV-1a over the per-rank counts: equal lists give equal hashes on every rank.
uint64_t hash_counts(const std::vector<size_t>& counts) {
  uint64_t h = 1469598103934665603ull;
  for (size_t c : counts) {
    for (int i = 0; i < 8; ++i) {
      h ^= (static_cast<uint64_t>(c) >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

template <typename T>
void put(unsigned char* out, size_t at, T v) {
  std::memcpy(out + at, &v, sizeof(T));
}
template <typename T>
T take(const unsigned char* in, size_t at) {
  T v;
  std::memcpy(&v, in + at, sizeof(T));
  return v;
}

bool split_counts(const OpHeader& h) { return h.kind == Kind::all_to_all && (h.flags & 1u) != 0; }

}  // namespace

OpHeader OpHeader::for_peer(const collectives::CollectiveArgs& args, int peer, uint64_t comm_id, uint64_t issue_seq,
                            uint64_t match_seq) {
  OpHeader h;
  h.kind = args.kind;
  h.dtype = args.dtype;
  h.op = is_reducing(args.kind) ? args.op : Op::sum;
  h.comm_id = comm_id;
  h.issue_seq = issue_seq;
  h.match_seq = match_seq;
  h.count = args.count;
  if (is_rooted(args.kind)) h.root = args.root;
  if (is_p2p(args.kind)) {
    h.root = args.peer;
    h.aux = args.tag;
  }
  if (!args.counts.empty()) {
    h.aux = hash_counts(args.counts);
    h.flags |= 1u;
  }
  if (args.kind == Kind::all_to_all && !args.send_counts.empty()) {
    const auto p = static_cast<size_t>(peer);
    h.count = p < args.send_counts.size() ? args.send_counts[p] : 0;
    h.aux = p < args.recv_counts.size() ? args.recv_counts[p] : 0;
    h.flags |= 1u;
  }
  return h;
}

void OpHeader::encode(unsigned char out[kBytes]) const {
  std::memset(out, 0, kBytes);
  put<uint32_t>(out, 0, kMagic);
  put<uint8_t>(out, 4, kVersion);
  put<uint8_t>(out, 5, static_cast<uint8_t>(kind));
  put<uint8_t>(out, 6, static_cast<uint8_t>(dtype));
  put<uint8_t>(out, 7, static_cast<uint8_t>(op));
  put<uint64_t>(out, 8, comm_id);
  put<uint64_t>(out, 16, issue_seq);
  put<uint64_t>(out, 24, match_seq);
  put<uint64_t>(out, 32, count);
  put<uint64_t>(out, 40, aux);
  put<int32_t>(out, 48, root);
  put<uint32_t>(out, 52, flags);
  put<uint32_t>(out, 56, segment);
  put<uint16_t>(out, 60, ring_depth);
  put<uint16_t>(out, 62, static_cast<uint16_t>(algo));
}

void OpHeader::renumber(const collectives::CollectiveArgs& args, uint64_t comm_id_now, uint64_t issue_seq_now,
                        uint64_t match_seq_now, unsigned char out[kBytes]) {
  comm_id = comm_id_now;
  issue_seq = issue_seq_now;
  match_seq = match_seq_now;
  if (is_p2p(args.kind)) aux = args.tag;
  put<uint64_t>(out, 8, comm_id);
  put<uint64_t>(out, 16, issue_seq);
  put<uint64_t>(out, 24, match_seq);
  put<uint64_t>(out, 40, aux);
}

Result<OpHeader> OpHeader::decode(const unsigned char* in, size_t bytes) {
  if (bytes != kBytes || take<uint32_t>(in, 0) != kMagic || take<uint8_t>(in, 4) != kVersion) {
    return protocol_error("expected a " + std::to_string(kBytes) + "-byte operation header, got " +
                          std::to_string(bytes) + " bytes that are not one");
  }
  OpHeader h;
  const auto kind = take<uint8_t>(in, 5), dtype = take<uint8_t>(in, 6), op = take<uint8_t>(in, 7);
  const auto algo = take<uint16_t>(in, 62);
  if (kind > static_cast<uint8_t>(Kind::recv) || dtype >= kNumDTypes || op >= kNumOps ||
      algo > static_cast<uint16_t>(collectives::Algo::direct)) {
    return protocol_error("operation header with unknown kind/dtype/op/algorithm " + std::to_string(kind) + "/" +
                          std::to_string(dtype) + "/" + std::to_string(op) + "/" + std::to_string(algo));
  }
  h.algo = static_cast<collectives::Algo>(algo);
  h.kind = static_cast<Kind>(kind);
  h.dtype = static_cast<DType>(dtype);
  h.op = static_cast<Op>(op);
  h.comm_id = take<uint64_t>(in, 8);
  h.issue_seq = take<uint64_t>(in, 16);
  h.match_seq = take<uint64_t>(in, 24);
  h.count = take<uint64_t>(in, 32);
  h.aux = take<uint64_t>(in, 40);
  h.root = take<int32_t>(in, 48);
  h.flags = take<uint32_t>(in, 52);
  h.segment = take<uint32_t>(in, 56);
  h.ring_depth = take<uint16_t>(in, 60);
  return h;
}

std::string OpHeader::describe() const {
  std::ostringstream o;
  o << collectives::to_string(kind) << " #" << issue_seq << " (";
  if (split_counts(*this)) {
    o << "sends " << count << ", expects " << aux << " " << to_string(dtype);
  } else if ((flags & 1u) != 0) {
    o << "per-rank counts (hash " << std::hex << aux << std::dec << ") " << to_string(dtype);
  } else {
    o << "count " << count << " " << to_string(dtype);
  }
  if (is_reducing(kind)) o << " " << to_string(op);
  if (is_rooted(kind)) o << " root " << root;
  if (kind == Kind::send) o << " to rank " << root;
  if (kind == Kind::recv) o << " from rank " << root;
  if (is_p2p(kind) && aux != 0) o << " tag " << aux;
  o << ")";
  return o.str();
}

// Which bytes of a peer's header must equal ours for mirrors(): 0xff where they must, 0 where
// they may differ. Every byte is a field (no padding): issue_seq, at 16, is the sender's own
// count; a send meets a receive, so there the kind (byte 5, checked apart: it must be the other
// one) and the root (48, each side's peer, which check_headers does not compare) differ too.
struct MirrorMask {
  uint64_t words[OpHeader::kBytes / 8];
  constexpr explicit MirrorMask(bool p2p) : words{} {
    unsigned char m[OpHeader::kBytes] = {};
    for (size_t b = 0; b < OpHeader::kBytes; ++b) {
      const bool free = (b >= 16 && b < 24) || (p2p && (b == 5 || (b >= 48 && b < 52)));
      m[b] = free ? 0 : 0xff;
    }
    for (size_t w = 0; w < OpHeader::kBytes / 8; ++w) {
      uint64_t v = 0;
      for (size_t k = 0; k < 8; ++k) v |= static_cast<uint64_t>(m[8 * w + k]) << (8 * k);
      words[w] = v;
    }
  }
};

bool mirrors(const OpHeader& mine, const unsigned char* mine_wire, const unsigned char* theirs, size_t bytes) {
  if (bytes != OpHeader::kBytes || split_counts(mine)) return false;
  const bool p2p = is_p2p(mine.kind);
  if (p2p && theirs[5] != static_cast<unsigned char>(mine.kind == Kind::send ? Kind::recv : Kind::send)) return false;
  // A word loaded from the header holds its byte b at bits 8 * (b % 8) on a little-endian
  // machine, where MirrorMask puts it.
  static_assert(std::endian::native == std::endian::little, "MirrorMask packs bytes little-endian");
  static constexpr MirrorMask kCollective(false), kP2p(true);
  const uint64_t* mask = p2p ? kP2p.words : kCollective.words;
  uint64_t differ = 0;
  for (size_t w = 0; w < OpHeader::kBytes / 8; ++w) {
    uint64_t a, b;
    std::memcpy(&a, mine_wire + 8 * w, 8);
    std::memcpy(&b, theirs + 8 * w, 8);
    differ |= (a ^ b) & mask[w];
  }
  return differ == 0;
}

Status check_headers(const OpHeader& mine, int rank, const OpHeader& theirs, int peer,
                     const std::string& peer_address) {
  bool same_call;
  if (is_p2p(mine.kind) || is_p2p(theirs.kind)) {
    same_call = is_p2p(mine.kind) && is_p2p(theirs.kind) && mine.kind != theirs.kind &&
                mine.count == theirs.count && mine.dtype == theirs.dtype && mine.aux == theirs.aux;
  } else if (split_counts(mine) || split_counts(theirs)) {
    same_call = mine.kind == theirs.kind && split_counts(mine) && split_counts(theirs) &&
                mine.count == theirs.aux && mine.aux == theirs.count && mine.dtype == theirs.dtype;
  } else {
    same_call = mine.kind == theirs.kind && mine.count == theirs.count && mine.dtype == theirs.dtype &&
                mine.op == theirs.op && mine.root == theirs.root && mine.aux == theirs.aux && mine.flags == theirs.flags;
  }
  const bool same_place = mine.match_seq == theirs.match_seq && mine.comm_id == theirs.comm_id;
  const bool same_pipeline = mine.segment == theirs.segment && mine.ring_depth == theirs.ring_depth;
  if (same_call && same_place && mine.algo != theirs.algo) {
    return Status(ErrorCode::mismatch,
                  std::string(collectives::to_string(mine.kind)) + " #" + std::to_string(mine.issue_seq) + " on rank " +
                      std::to_string(rank) + ": rank " + std::to_string(peer) + " (" + peer_address + ") runs it as " +
                      collectives::to_string(theirs.algo) + ", this rank as " + collectives::to_string(mine.algo) +
                      ": their messages do not combine. Set BRAID_ALGO the same on every rank (or leave it unset), "
                      "and run the same braid build everywhere");
  }
  if (same_call && same_place && !same_pipeline) {
    return Status(ErrorCode::mismatch,
                  std::string(collectives::to_string(mine.kind)) + " #" + std::to_string(mine.issue_seq) + " on rank " +
                      std::to_string(rank) + ": rank " + std::to_string(peer) + " (" + peer_address +
                      ") pipelines in segments of " + std::to_string(theirs.segment) + " bytes at ring depth " +
                      std::to_string(theirs.ring_depth) + ", this rank in " + std::to_string(mine.segment) +
                      " bytes at depth " + std::to_string(mine.ring_depth) +
                      ". Set BRAID_CHUNK_BYTES and BRAID_RING_DEPTH alike on every rank (or leave them unset)");
  }
  if (same_call && same_place) return Status::ok();
  std::ostringstream m;
  m << collectives::to_string(mine.kind) << " #" << mine.issue_seq << " on rank " << rank << ": mismatch with rank "
    << peer << " (" << peer_address << "), which called " << theirs.describe() << "; this rank called "
    << mine.describe();
  if (mine.match_seq != theirs.match_seq) {
    m << " (" << (is_p2p(mine.kind) ? "point-to-point message" : "collective") << " number " << theirs.match_seq
      << " there, " << mine.match_seq << " here)";
  }
  if (mine.comm_id != theirs.comm_id) m << " (the header belongs to another communicator)";
  m << ". Every rank must call the same collectives in the same order with the same counts, dtypes, ops and "
       "roots (and matching send/recv)";
  return Status(ErrorCode::mismatch, m.str());
}

}  // namespace braid
