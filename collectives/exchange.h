// collectives/exchange.h - patterns where every rank talks to many peers: all_to_all (pairwise
// exchange), barrier (dissemination), and point-to-point send/recv.
//
// send/recv do not match tags: messages between two ranks are taken in the order they were
// posted, which is what a tag-less in-order connection gives (CollectiveArgs::tag is unused).
#pragma once

#include "collectives/schedule.h"

namespace braid::collectives {

Schedule pairwise_all_to_all(const Plan& p);  // send_counts/recv_counts: split sizes
Schedule dissemination_barrier(const Plan& p);
Schedule p2p_send(const Plan& p);  // count elements of send to p.peer
Schedule p2p_recv(const Plan& p);  // count elements from p.peer into recv

}  // namespace braid::collectives
