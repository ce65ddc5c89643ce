// collectives/tree.h - binomial trees: latency-optimal (ceil(log2 n) rounds) for small messages.
//
// broadcast, reduce, gather and scatter at small sizes, where the alpha of a message dominates;
// and `direct` gather/scatter (the root talks to every rank itself), which wins when the root's
// link, not the number of rounds, is what limits. All functions are pure: they depend only on
// the Plan.
#pragma once

#include "collectives/schedule.h"

namespace braid::collectives {

Schedule binomial_broadcast(const Plan& p);
Schedule binomial_reduce(const Plan& p);
Schedule binomial_gather(const Plan& p);   // counts: gatherv
Schedule binomial_scatter(const Plan& p);  // counts: scatterv
Schedule direct_gather(const Plan& p);
Schedule direct_scatter(const Plan& p);

}  // namespace braid::collectives
