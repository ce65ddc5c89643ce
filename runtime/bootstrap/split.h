// runtime/bootstrap/split.h - a child communicator's configuration, from what every rank of the
// parent said.
//
// Every rank all_gathers its card (color, key, host) over the parent, so all of them agree on
// who is in which child and in what order without any store round trip; the child then meets in
// its own store namespace ("split<n>/<color>/" inside the parent's) and builds its own transport
// and connections on its own progress thread, exactly as a top-level communicator does
// (the communicator's split() runs the all_gather and creates the child).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/communicator_config.h"

namespace braid {

// Words in one rank's card: color, key, a hash of the host name.
inline constexpr size_t kSplitCardWords = 3;

// This rank's card for a split into `color`, ordered by `key`.
std::vector<int64_t> split_card(int color, int key);

// This rank's child configuration: `parent` is this rank's, `all` the cards of every parent rank
// in rank order, `n` the number of this split on the parent (1, 2, ...), the same on every rank.
// Pure: the same inputs give the same child on every rank. `color` must not be kNoColor.
CommunicatorConfig split_config(const CommunicatorConfig& parent, uint64_t n, int color,
                                const std::vector<int64_t>& all);

// A child of `parent` made of `members` (parent ranks, in the child's rank order; this rank among
// them), `hosts[i]` the host hash of members[i], meeting in the namespace `prefix` inside the
// parent's. What split_config and shrink_config (shrink.h) share. Pure.
CommunicatorConfig child_config(const CommunicatorConfig& parent, const std::string& prefix,
                                const std::vector<int>& members, const std::vector<int64_t>& hosts);

// The hash of this host's name that cards carry: ranks with equal hashes count as one host.
int64_t host_hash();

}  // namespace braid
