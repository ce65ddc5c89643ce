// runtime/engine/op_header.h - the small header every operation sends each peer before its data.
//
// Ranks that call different collectives (or the same one with other counts, dtypes, ops or
// roots) would otherwise exchange bytes that happen to fit and corrupt results silently, or
// wait for each other forever. So operation #N puts a header in front of its first message to
// every peer, and checks the header in front of each peer's first message before using any of
// its data (collectives::Executor::set_headers). Small first messages carry the header inline
// (one staging copy, no extra message: docs/code_figures.md has its cost); large ones send it
// as a message of its own just before. A rank that only receives from a peer (a broadcast
// child) sends it a header-only message, so pure senders (the root) check too.
//
// Byte layout (host byte order: every rank of a job runs on the same architecture):
//    0  u32  magic 'BRDH' (0x48445242)
//    4  u8   version (3)
//    5  u8   kind         collectives::Kind
//    6  u8   dtype        braid::DType
//    7  u8   op           braid::Op (meaningful for reducing kinds only)
//    8  u64  comm_id      the communicator's id
//   16  u64  issue_seq    the operation's number on the sending rank (#N in messages)
//   24  u64  match_seq    collectives: index among the rank's collectives; send/recv: index
//                         among the sends from the sender to the receiver (the receiver counts
//                         its receives from the sender the same way)
//   32  u64  count        elements (all_to_allv: elements the sender sends to the receiver)
//   40  u64  aux          all_to_allv: elements the sender expects from the receiver;
//                         send/recv: the tag;
//                         gatherv/scatterv forms: a hash of the per-rank counts; else 0
//   48  i32  root         rooted kinds: the root; send/recv: the sender's peer; else -1
//   52  u32  flags        bit 0: out-of-place per-rank counts are in use (v forms)
//   56  u32  segment      the pipelining segment in bytes (BRAID_CHUNK_BYTES or its default)
//   60  u16  ring_depth   ring columns per group (BRAID_RING_DEPTH or its automatic choice)
//   62  u16  algo         collectives::Algo that runs (never automatic)
// Ranks that cut segments differently, or run another algorithm's schedule, would pair messages
// of different sizes or order and combine data that does not belong together, so segment,
// ring_depth and algo are checked like the call itself. (Ranks check their settings against
// each other when a communicator is created, agreed_settings.h; this catches what still
// differs, such as two builds choosing differently.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/collective.h"
#include "common/status.h"

namespace braid {

struct OpHeader {
  static constexpr uint32_t kMagic = 0x48445242;
  static constexpr uint8_t kVersion = 3;
  static constexpr size_t kBytes = 64;

  collectives::Kind kind = collectives::Kind::all_reduce;
  DType dtype = DType::f32;
  Op op = Op::sum;
  uint64_t comm_id = 0;
  uint64_t issue_seq = 0;
  uint64_t match_seq = 0;
  uint64_t count = 0;
  uint64_t aux = 0;
  int32_t root = -1;
  uint32_t flags = 0;
  uint32_t segment = 0;
  uint16_t ring_depth = 0;
  collectives::Algo algo = collectives::Algo::automatic;

  // The header `rank` sends to `peer` for `args`.
  static OpHeader for_peer(const collectives::CollectiveArgs& args, int peer, uint64_t comm_id, uint64_t issue_seq,
                           uint64_t match_seq);
  void encode(unsigned char out[kBytes]) const;
  // For a kept run of the same shape (run_cache.h), called again with `args`: sets what for_peer
  // takes from the call beyond its shape (the numbers, a send's or receive's tag), and rewrites
  // just those bytes in `out`, this header encoded before.
  void renumber(const collectives::CollectiveArgs& args, uint64_t comm_id, uint64_t issue_seq, uint64_t match_seq,
                unsigned char out[kBytes]);
  // Fails with ErrorCode::protocol when the bytes are not a header of this version.
  static Result<OpHeader> decode(const unsigned char* in, size_t bytes);

  // "broadcast #3 (count 1024 f32 root 0)"
  std::string describe() const;
};

// The quick answer for the usual case, before any decoding: `theirs` (bytes as received) is
// byte for byte `mine_wire` (mine, encoded) but for issue_seq; for a send or receive, also but
// for the kind (which must be the other of the two) and the root (each side's peer). Not for
// all_to_all's per-peer counts, which the two sides write crosswise. Then check_headers would
// pass; false only means it has to be asked.
bool mirrors(const OpHeader& mine, const unsigned char* mine_wire, const unsigned char* theirs, size_t bytes);

// Checks the header `theirs` that rank `peer` sent us against ours (`mine`, which we sent it).
// Returns ErrorCode::mismatch naming both ranks and both calls when they do not belong together.
Status check_headers(const OpHeader& mine, int rank, const OpHeader& theirs, int peer,
                     const std::string& peer_address);

}  // namespace braid
