// tests/collectives/schedule_simulator.h - runs every rank's schedule symbolically, no sockets.
//
// Each byte of every buffer holds a symbol: the set of ranks whose contribution it sums (a
// bitmask) and the byte position those contributions came from. Reducing two symbols requires
// the same position and disjoint sets, so a contribution counted twice, or bytes reduced
// against the wrong position, is caught at the step that does it. Execution follows the
// executor's rules (in-order start, bounded window, data-flow hazards, per-peer send order)
// with the strictest message semantics: a send completes only when the peer has posted the
// matching receive. So "finished" means no deadlock with that window on any transport.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/collective.h"

namespace braid::collectives::testing {

struct Symbol {
  uint32_t mask = 0;        // ranks summed into this byte
  uint32_t pos = ~0u;       // byte position in the contributors' input
  uint8_t scaled = 0;       // times the avg factor was applied
  bool operator==(const Symbol&) const = default;
};

// One message delivered: from rank, to rank, the sender's step index, bytes.
struct SimMessage {
  int from = 0;
  int to = 0;
  size_t step = 0;
  size_t bytes = 0;
};

struct SimResult {
  bool ok = true;
  std::string error;                             // first problem found, with rank and step
  std::vector<std::vector<Symbol>> recv;         // final recv buffer of each rank
  size_t messages = 0;
  std::vector<SimMessage> sent;                  // in delivery order
};

// Simulates `args` (pointers are only compared: pass distinct non-null dummies, or equal ones
// for in place) on `size` ranks with `algo`, segment size `segment_bytes` and at most
// `window` steps in flight (0: each schedule's own), ring columns in groups of `ring_depth`. Each rank's send buffer starts as
// {1 << rank, byte position}; a broadcast root's recv likewise.
// `order`: the ring order (Plan::order); null: rank order.
SimResult simulate(const CollectiveArgs& args, Algo algo, int size, size_t segment_bytes, size_t window,
                   size_t ring_depth = 1, std::shared_ptr<const std::vector<int>> order = nullptr);
// The same with each rank's own arguments (all_to_all split sizes differ per rank).
SimResult simulate(const std::vector<CollectiveArgs>& per_rank, Algo algo, size_t segment_bytes, size_t window,
                   size_t ring_depth = 1, std::shared_ptr<const std::vector<int>> order = nullptr);

// Bytes of the send and recv buffer rank `rank` needs for `args`.
size_t send_bytes(const CollectiveArgs& args, int rank, int size);
size_t recv_bytes(const CollectiveArgs& args, int rank, int size);

}  // namespace braid::collectives::testing
