// collectives/ring.h - ring algorithms: bandwidth-optimal for large messages.
//
// Each rank sends only to its successor (rank+1) and receives only from its predecessor, so
// every link of the ring carries the same load and the busiest link moves 2(n-1)/n of the
// buffer for all_reduce, (n-1)/n for all_gather and reduce_scatter. The chain is the ring with
// one link removed, rotated so the root is at its head: broadcast and reduce of large buffers.
// All functions are pure: they depend only on the Plan.
#pragma once

#include "collectives/schedule.h"

namespace braid::collectives {

Schedule ring_all_reduce(const Plan& p);
Schedule ring_all_gather(const Plan& p);      // counts: gatherv
Schedule ring_reduce_scatter(const Plan& p);  // counts: reduce_scatterv
Schedule chain_broadcast(const Plan& p);
Schedule chain_reduce(const Plan& p);

}  // namespace braid::collectives
