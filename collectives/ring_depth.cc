#include "collectives/ring_depth.h"

#include <algorithm>

#include "collectives/algorithms.h"

namespace braid::collectives {

RingDepth choose_ring_depth(size_t requested, bool host_local, size_t segment_bytes) {
  if (requested > 0) return {requested, "BRAID_RING_DEPTH"};
  if (host_local) return {1, "every rank on a host-local address"};
  const size_t segment = segment_bytes != 0 ? segment_bytes : kDefaultSegmentBytes;
  const size_t depth = std::clamp<size_t>((kNetworkHopBytes + segment - 1) / segment, 2, kMaxRingDepth);
  return {depth, "links leave the host: " + std::to_string(depth) + " segments of " + std::to_string(segment >> 10) +
                     " KiB in flight per hop"};
}

}  // namespace braid::collectives
