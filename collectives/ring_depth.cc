#include "collectives/ring_depth.h"

#include <algorithm>

#include "collectives/algorithms.h"

namespace braid::collectives {

RingDepth choose_ring_depth(size_t requested, bool host_local, size_t segment_bytes, size_t ranks) {
  if (requested > 0) return {requested, "BRAID_RING_DEPTH"};
  if (host_local) return {1, "every rank on a host-local address"};
  const size_t segment = segment_bytes != 0 ? segment_bytes : kDefaultSegmentBytes;
  const size_t wanted = std::clamp<size_t>((kNetworkHopBytes + segment - 1) / segment, 2, kMaxRingDepth);
  const size_t slots_per_depth = 4 * (std::max<size_t>(ranks, 2) - 1) * segment;
  const size_t depth = std::min(wanted, std::max<size_t>(2, kRingSlotBudget / slots_per_depth));
  std::string why = "links leave the host: " + std::to_string(depth) + " segments of " +
                    std::to_string(segment >> 10) + " KiB in flight per hop";
  if (depth < wanted) {
    why += " (fewer than 2 MiB: with " + std::to_string(ranks) + " ranks more would hold over 64 MiB of landing slots)";
  }
  return {depth, why};
}

}  // namespace braid::collectives
