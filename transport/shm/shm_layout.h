// transport/shm/shm_layout.h - the bytes two ranks of one host share for one connection.
//
// The connector creates one memfd per connection (never a name in /dev/shm, so nothing is left
// behind when either side is killed: the memory goes with the last mapping), sizes it, and hands
// it to the acceptor over the unix socket with SCM_RIGHTS. Endpoint 0 is the connector, 1 the
// acceptor; direction d carries messages from endpoint d to endpoint 1 - d.
//
//   offset                 size        what
//   0                      kHeaderBytes SegmentHeader
//   kHeaderBytes           2 x 256     RingControl of direction 0, then direction 1
//   kDataOffset            ring_bytes  data of direction 0
//   kDataOffset+ring_bytes ring_bytes  data of direction 1
//
// Each direction is a single-producer/single-consumer byte ring. tail (written by the producer)
// and head (by the consumer) only grow; position p is byte p % ring_bytes. Every record starts
// on a cache line (kRecordAlign) with a RecordHeader; an inline record carries its payload
// right after the header (a message of up to 32 bytes is one cache line), streamed in as space
// frees and read out as it arrives, so a message larger than the ring moves pipelined (two
// copies). A cma record carries only the address of the sender's buffer: the receiver reads it
// with process_vm_readv (one copy) and then counts it in cma_done, which completes the send.
//
// A wrap record (a header alone, len 0, seq the next message's number) sends the reader to the
// start of the next lap: the producer writes one when it finds the ring empty and the record it
// is about to write fits twice in the part of the lap already passed (until the reader passes
// the wrap record, a message sent right behind this one has only the rest of that part). Small
// messages then keep reusing the first lines of the ring, which both caches still hold, instead
// of walking through all of it: a line written again soon after the peer read it moves between
// the two CPUs cheaply, one not touched for a whole lap has to be fetched from further away
// first (docs/performance.md, "The steady cost of a small operation"). The producer also writes
// one where a record it writes whole (a message of up to 64 KiB with nothing queued ahead) would
// run over the ring's end and the ring has room for the skipped bytes too: such a record then
// starts the next lap whole, and the reader takes it in one copy. Other records (larger
// messages, sends queued behind a full ring) may run over the end, in two pieces.
//
//   RecordHeader   offset size field
//                  0      8    len   the message's bytes
//                  8      4    kind  RecordKind
//                  12     4    reserved, zero
//                  16     8    addr  cma: the sender's buffer in its own address space
//                  24     8    seq   the message's number on this connection (a check)
//                  32          (total; the record then takes round_up(32 + payload, 64) bytes)
//
// Waiting: an endpoint that goes to sleep sets its `sleeping` flag, then looks at every ring
// once more; whoever moves a tail, a head or cma_done afterwards sees the flag and writes the
// sleeper's eventfd (passed at setup). Both sides order the flag against the counters with
// sequentially consistent operations, so a wake-up is never lost.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace braid::transport::shm {

inline constexpr uint64_t kSegmentMagic = 0x314d485344495242;  // "BRIDSHM1"
inline constexpr uint32_t kSegmentVersion = 3;
inline constexpr size_t kRecordAlign = 64;
inline constexpr size_t kRecordHeaderBytes = 32;
inline constexpr size_t kHeaderBytes = 4096;
inline constexpr size_t kControlBytes = 256;
inline constexpr size_t kDataOffset = kHeaderBytes + 2 * kControlBytes;

enum class RecordKind : uint32_t { inline_data = 1, cma = 2, wrap = 3 };

struct RecordHeader {
  uint64_t len = 0;
  RecordKind kind = RecordKind::inline_data;
  uint32_t reserved = 0;
  uint64_t addr = 0;
  uint64_t seq = 0;
};
static_assert(sizeof(RecordHeader) == kRecordHeaderBytes);

// What a receiver found when it tried to read its sender's memory (cma_readable).
enum CmaProbe : uint32_t { kCmaUnknown = 0, kCmaYes = 1, kCmaNo = 2 };

struct alignas(64) Endpoint {
  std::atomic<uint32_t> sleeping{0};  // in poll's sleep: wake through its eventfd
  std::atomic<uint32_t> closed{0};    // close() ran: nothing more comes from it
  std::atomic<uint32_t> cma_readable{kCmaUnknown};  // it can read its peer's memory (set by it)
  uint32_t pid = 0;
  uint64_t probe_addr = 0;   // an 8-byte word in its own memory holding probe_value
  uint64_t probe_value = 0;
  uint32_t probe_errno = 0;  // why it could not read its peer's word (cma_readable kCmaNo), or 0
  // The CPU its owner last polled on, plus one (0: not yet). A spinner whose peer last ran on
  // its own CPU steps off it: the peer is then queued behind it (ShmTransport::poll).
  std::atomic<uint32_t> on_cpu{0};
};

struct SegmentHeader {
  uint64_t magic = kSegmentMagic;
  uint32_t version = kSegmentVersion;
  uint32_t reserved = 0;
  uint64_t ring_bytes = 0;
  alignas(64) Endpoint ends[2];
};
static_assert(sizeof(SegmentHeader) <= kHeaderBytes);

struct RingControl {
  alignas(64) std::atomic<uint64_t> tail{0};      // producer
  alignas(64) std::atomic<uint64_t> head{0};      // consumer
  alignas(64) std::atomic<uint64_t> cma_done{0};  // consumer: cma records read so far
};
static_assert(sizeof(RingControl) <= kControlBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory counters must be lock-free to work across processes");

inline size_t segment_bytes(size_t ring_bytes) { return kDataOffset + 2 * ring_bytes; }
inline size_t record_bytes(size_t payload) {
  return (kRecordHeaderBytes + payload + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
}
// The first position of the lap after the one `pos` lies in (pos itself when it starts one).
inline uint64_t next_lap(uint64_t pos, uint64_t ring_bytes) { return (pos + ring_bytes - 1) / ring_bytes * ring_bytes; }

}  // namespace braid::transport::shm
