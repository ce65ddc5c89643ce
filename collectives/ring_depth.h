// collectives/ring_depth.h - how many segment columns a ring keeps moving per hop
// (Plan::ring_depth), chosen alike on every rank from facts every rank shares.
//
// A ring hop can only send a segment it has received (and reduced), so the bytes a link has
// queued ahead of it are the depth's worth of segments. That is the slack that covers
// everything between one hop and the next: the second shaper's queue, the receiver's wake-up,
// and, where the ranks share their cores with other work, the time a rank waits for a CPU.
// A link that runs dry stalls every hop after it. Over the network the slack is counted in
// bytes (kNetworkHopBytes, at least two segments), so a smaller segment gets a deeper ring and
// a larger one keeps the same bytes queued; on host-local copies more in flight only evicts the
// bytes from cache, so the depth stays 1 (docs/performance.md has both measurements).
#pragma once

#include <cstddef>
#include <string>

namespace braid::collectives {

// Bytes of each hop a ring keeps in flight when its links leave the host.
inline constexpr size_t kNetworkHopBytes = size_t{2} << 20;
// The deepest ring (BRAID_RING_DEPTH's bound; operation headers carry the depth in 16 bits).
inline constexpr size_t kMaxRingDepth = 16;
// What the landing slots of a ring all_reduce's window may take: its window is 4(n-1) steps
// per depth (ring.cc), each with a segment-sized slot (executor.h). Beyond it a deeper ring
// would cost memory growing with the ranks; depth 2 is kept whatever it costs.
inline constexpr size_t kRingSlotBudget = size_t{64} << 20;

struct RingDepth {
  size_t depth = 1;
  std::string why;  // for BRAID_DEBUG=INFO
};

// `requested`: BRAID_RING_DEPTH (0: automatic). `host_local`: every link of the job is a
// host-local copy (loopback or shared memory). `segment_bytes`: the segment rings are cut in
// (0: the default one). `ranks`: the communicator's size. Every rank must pass the same
// values: the depth fixes the order of a ring's messages.
RingDepth choose_ring_depth(size_t requested, bool host_local, size_t segment_bytes, size_t ranks);

}  // namespace braid::collectives
