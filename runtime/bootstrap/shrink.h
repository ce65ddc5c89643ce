// runtime/bootstrap/shrink.h - the ranks that go on after a failure agree, through the store, on
// who they are; then they meet as a new communicator (Communicator::shrink).
//
// Words: the old communicator is the one that failed (or that a planned shrink leaves); an
// attempt is one call of shrink() on it (1, 2, ... counted alike on every rank, since each
// failed attempt fails on every member); a survivor is a rank of the old communicator that
// calls shrink(). Agreement cannot go through the old communicator's links, which are closed;
// it goes through its store, whose compare_set is atomic. Keys, inside the old communicator's
// namespace:
//   shrink<n>/alive/<r>  "<host hash>": old rank r called attempt n and is alive
//   shrink<n>/members    "0,2,3": the old ranks of the new communicator, in its rank order;
//                        written once (compare_set on an absent key), read by everyone else
// Each survivor posts alive/<r>, then polls: once `members` exists it adopts it; otherwise,
// once every rank it waits for has posted, or its window passed, it proposes the ranks that
// posted by then (the excluded ones left out) with compare_set, and adopts what the store then
// holds - its own list or one that came first. It waits for every rank neither excluded nor
// suspected; a suspect (the rank the failure named as dead or silent) is taken when it posted in
// time, never waited for. Suspects are also found while waiting (ShrinkRound::gone: ranks whose
// connection ended without the closing mark a survivor leaves, failure_board.h): when a whole
// host is lost the failure names one of its ranks, and the others are found so. A survivor not
// in the adopted list (stopped, or later than the window) gets an error: it can never join that
// communicator. The new one meets in the namespace
// "shrink<n>/" inside the old one's, with its own id and connections, as a split child does.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "braid/store.h"
#include "common/status.h"
#include "runtime/communicator_config.h"

namespace braid {

struct ShrinkRound {
  int rank = 0;                      // this rank in the old communicator
  int size = 1;                      // the old communicator's size
  uint64_t attempt = 1;              // this rank's shrink() calls on the old communicator, this one included
  std::vector<bool> excluded{};      // per old rank: left out by the caller (shrink(exclude))
  std::vector<bool> suspected{};     // per old rank: named dead or silent by the failure
  std::chrono::milliseconds window{5000};  // how long to wait for the others (BRAID_SHRINK_TIMEOUT_S)
  // Old ranks known dead by now, suspected from then on; asked at each look at the store while
  // waiting, since the ranks of a lost host go one by one. Null: none beyond `suspected`.
  std::function<std::vector<int>()> gone{};
};

struct ShrinkMembers {
  std::vector<int> members;    // old ranks, in the new communicator's rank order
  std::vector<int64_t> hosts;  // the host hash each member posted
};

// Posts this rank alive in `ns` (the old communicator's namespace) and returns the members every
// survivor adopts. A Status error when this rank is not among them or the list is malformed;
// the store's own failures are thrown as braid::Error (the caller says what they mean).
Result<ShrinkMembers> agree_on_members(Store& ns, const ShrinkRound& round);

// This rank's configuration in the new communicator: `parent` is its old one's. The store's
// server, when this rank runs it, is shared with the new communicator, so that the old one may
// go first. Pure.
CommunicatorConfig shrink_config(const CommunicatorConfig& parent, uint64_t attempt, const ShrinkMembers& m);

}  // namespace braid
