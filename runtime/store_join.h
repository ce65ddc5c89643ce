// runtime/store_join.h - ranks meeting in a Store: claim a rank, agree on the size, wait for all.
//
// braid/owner/<r> -> "<host>:<pid>" of the process owning rank r for the whole job.
// The rest lives under a namespace per communicator creation ("braid/c<generation>/", where
// generation counts this process's creations on this store: every rank counts the same way):
//   rank/<r>     -> "<host>:<pid>" of rank r, once it arrived
//   world_size   -> the size the first rank brought; a rank bringing another size fails the job
//   joined       -> counter; the rank that makes it reach `size` sets "ready" to "ok"
//   ready        -> "ok", or "error: <reason>" written by the rank that found a problem, so every
//                   waiting rank fails at once with that reason instead of at the timeout
//   finished     -> counter of ranks that destroyed their communicator (the store's server
//                   stays up until it reaches `size`, bounded)
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "braid/store.h"
#include "common/status.h"

namespace braid {

struct JoinResult {
  std::shared_ptr<Store> store;  // the communicator's namespace inside the job store
  uint64_t comm_id = 0;          // the same on every rank; refuses other communicators' connections
};

// Joins rank `rank` of `size` through `store`; returns when all ranks have joined.
// Errors (duplicate rank, size disagreement, timeout naming the missing ranks) are Status values.
Result<JoinResult> join_through_store(std::shared_ptr<Store> store, int rank, int size, int generation,
                                      std::chrono::milliseconds timeout);

}  // namespace braid
