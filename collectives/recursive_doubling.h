// collectives/recursive_doubling.h - recursive doubling all_reduce, for tiny buffers.
//
// log2(n) rounds in which every rank exchanges its whole buffer with one partner: the fewest
// message latencies an all_reduce can pay, at the price of moving the whole buffer each
// round. Worth it while a message's alpha dwarfs its bytes (a few KiB on these VMs).
#pragma once

#include "collectives/schedule.h"

namespace braid::collectives {

Schedule rd_all_reduce(const Plan& p);

}  // namespace braid::collectives
