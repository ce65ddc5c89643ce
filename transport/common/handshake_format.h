// transport/common/handshake_format.h - the first bytes of every socket a transport opens.
//
// Every integer is little-endian (the only byte order braid runs on; checked below).
//
// Handshake: every socket of a connection starts with a mutual challenge-response that proves
// both ends know the job's secret (common/job_secret.h), before any frame is trusted:
//
//   connector (rank c)                                   acceptor (rank a)
//   hello: Handshake{c -> a, nonce_c}  ---------------->  checks comm_id, ranks, sockets
//              <----------------  answer: Handshake{a -> c, nonce_a}, proof_a
//   checks the answer, verifies proof_a
//   proof_c  ------------------------------------------>  verifies proof_c: the socket is rank c's
//
//   proof_a = prove(to_connector, nonce_c, nonce_a, transcript)   (a MAC, kMacBytes)
//   proof_c = prove(to_acceptor,  nonce_a, nonce_c, transcript)
//   transcript = kTranscriptLabel | hello's kHandshakeBytes | answer's kHandshakeBytes
//
// The transcript holds both handshakes whole, so each proof is bound to comm_id, both ranks,
// nsocks and socket_index (and each end's host identity): a proof made for one socket, rank
// or communicator is worthless on any other, and the fresh nonces make a recorded one
// worthless later. The acceptor proves first because it learns who the connector claims to
// be from the hello (common/job_secret.h draws the acceptor's nonce going first; the bytes
// MACed are the same). A connector that cannot verify proof_a knows at once that the two
// secrets differ (or that a stranger answers), and says so; it closes without proving itself.
// An acceptor commits a socket to a rank only after proof_c verifies, so a stranger who sends
// a perfect hello first cannot take the place of the rank it claims to be. Without a secret
// both ends use the all-zero key: same bytes, no protection (job_secret.h).
//
// Who waits for whom (runtime/links/peer_links.cc, connect_peers): rank r accepts from every
// lower rank, in rank order, then connects to every higher one. connect() now waits for the
// answer, so it waits for its acceptor to be inside accept(). That cannot deadlock: an
// acceptor's accept() advances every socket that reaches its listener, whichever rank it is
// waiting for (the rest are kept for their own accept call), and rank s is in accept() from
// the moment the addresses are exchanged until it has every lower rank's sockets; it cannot
// leave that phase before rank r < s finished connecting to it. So a connector waits only on an
// acceptor that is answering; an acceptor waits only on lower ranks, and by induction from
// rank 0 (which only connects) every rank gets through. With nsocks > 1 each socket is one
// such exchange and accept(r) returns only when all of them are done. A split() communicator
// builds its own transport (own listener, own comm_id) with the same order among its members.
// The acceptor drives every socket's exchange without blocking (one poll over all of them),
// so a stranger that sends nothing, or half a hello, delays no one; each socket has
// kHandshakeTimeout from its accept to finish.
//
// Every version starts with magic, version and nsocks, so the acceptor reads those
// kHandshakePrefixBytes first and refuses another version (with its reason in the log) before
// waiting for a body whose size it does not know.
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
//   176    32   nonce        the sender's fresh random nonce
//   208         (total)
// The answer is the same layout (ranks swapped, the same comm_id, nsocks and socket_index)
// followed by proof_a; the connector's last message is proof_c alone.
// Version 1 ended at offset 32 (no host identity, no answer); version 2 at offset 176 (no
// nonce, no proofs: the connector never waited for the answer).
//
// tcp opens every socket of a connection this way; ib and shm open their one setup socket
// (connection cards, ring names, liveness) the same way, so each of them meets only a rank that
// proved it knows the job's secret.
#pragma once

#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/job_secret.h"
#include "transport/common/host_identity.h"

namespace braid::transport {

static_assert(std::endian::native == std::endian::little, "braid's wire format assumes a little-endian host");

inline constexpr uint32_t kHandshakeMagic = 0x48445242;  // "BRDH"
inline constexpr uint16_t kProtocolVersion = 3;
inline constexpr size_t kHandshakePrefixBytes = 8;  // magic, version, nsocks
inline constexpr size_t kHandshakeBytes = 208;
inline constexpr size_t kAnswerBytes = kHandshakeBytes + auth::kMacBytes;  // the answer and proof_a
inline constexpr size_t kProofBytes = auth::kMacBytes;                      // proof_c
inline constexpr std::string_view kTranscriptLabel = "braid tcp connection v3";
inline constexpr int kMaxSockets = 64;
// How long an accepted socket has to complete its side of the handshake; a socket that does not
// is closed (it never delays another: see above).
inline constexpr std::chrono::milliseconds kHandshakeTimeout{2000};

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
  auth::Nonce nonce{};
};
static_assert(sizeof(Handshake) == kHandshakeBytes);
static_assert(offsetof(Handshake, boot_id) == 32 && offsetof(Handshake, cpu_mask) == 48 &&
              offsetof(Handshake, nonce) == 176);

// The struct has no padding and the host is little-endian, so encoding is a copy.
inline void encode(const Handshake& h, unsigned char* out) { std::memcpy(out, &h, sizeof h); }
inline Handshake decode_handshake(const unsigned char* in) {
  Handshake h;
  std::memcpy(&h, in, sizeof h);
  return h;
}
// What both proofs of one socket's handshake are bound to (see the top).
inline std::string handshake_transcript(const Handshake& hello, const Handshake& answer) {
  std::string t(kTranscriptLabel);
  t.append(reinterpret_cast<const char*>(&hello), sizeof hello);
  t.append(reinterpret_cast<const char*>(&answer), sizeof answer);
  return t;
}

}  // namespace braid::transport
