// collectives/ring_order.h - the order of ranks around a ring (and down a tree), from where
// the ranks live.
//
// Why: a ring sends every step from each rank to the next. Numbered as launchers number them
// (host A: 0, 2; host B: 1, 3, as round-robin placement gives), every hop of the ring crosses
// the network and each host pushes one message per local rank across its link per step. With
// the ranks of one host adjacent (0, 2, 1, 3), each host has exactly one rank whose next
// neighbour lives elsewhere: one network crossing per host per step, the rest moves inside the
// host (NCCL orders its rings the same way).
//
// The order is a pure function of every rank's host label, which every rank reads alike from
// the store, so every rank computes the same ring. Hosts keep the order of their lowest rank
// and ranks keep their numbering inside a host, so ranks that are already grouped (the usual
// torchrun layout: 0..k-1 on the first host) keep the identity order.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace braid::collectives {

// order[v] is the rank at position v of the ring; hosts[r] labels rank r's host (any text:
// equal labels, same host).
std::vector<int> ring_order(const std::vector<std::string>& hosts);

// Whether order[v] == v for every v (schedules then skip the relabelling).
bool is_identity(const std::vector<int>& order);

// "0 2 | 1 3": the ring, a bar where it leaves a host. For BRAID_DEBUG=INFO.
std::string describe_ring(const std::vector<int>& order, const std::vector<std::string>& hosts);

}  // namespace braid::collectives
