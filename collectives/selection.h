// collectives/selection.h - the latency/bandwidth cost model behind select_algorithm().
//
// Each candidate algorithm's time is estimated as (messages on its critical path) * alpha +
// (bytes on its busiest link) * beta, and the cheapest wins. The constants describe the VMs
// this was written on (docs/code_figures.md, "Collectives": where each comes from), not a real
// cluster; on a fast fabric alpha shrinks and the switch points move toward smaller sizes.
#pragma once

#include <cstddef>
#include <string>

#include "collectives/collective.h"

namespace braid::collectives {

struct CostModel {
  double alpha_s = 40e-6;  // per message: a syscall and a thread wake-up on each side
  double beta_s_per_byte = 1 / 1.5e9;  // loopback TCP
  // Reducing a byte in memory: paid on the critical path only by algorithms that cannot
  // overlap it with the next transfer (rd reduces a whole round after receiving it).
  double gamma_s_per_byte = 1 / 5e9;
  size_t segment_bytes = size_t{256} << 10;
};

// Estimated seconds for `algo` to run `kind` on `bytes` (the whole buffer for all_reduce,
// broadcast and reduce; the whole gathered buffer for the block collectives) over `size` ranks.
double estimate_seconds(Kind kind, Algo algo, size_t bytes, int size, const CostModel& model = {});

// The automatic choices for `size` ranks, by collective and f32 message size, in one line:
// "all_reduce rd, ring from 128K; broadcast tree, chain from 2M; ..." (BRAID_DEBUG=INFO).
std::string describe_selection(int size);

}  // namespace braid::collectives
