// runtime/bootstrap/store_join.h - ranks meeting in a Store: claim a rank, agree on the size, wait for all.
//
// braid/owner/<r> -> "<host>:<pid>" of the process owning rank r for the whole job (kept: one
// per rank, however many communicators the job makes).
// The rest lives under a namespace per communicator creation ("braid/c<generation>/", where
// generation counts this process's creations on this store: every rank counts the same way;
// a split's is "split<n>/<color>/" inside its parent's, without the join keys):
//   rank/<r>     -> "<host>:<pid>" of rank r, once it arrived                          (join)
//   world_size   -> the size the first rank brought; a rank bringing another size fails the job
//   comm_id      -> the communicator's id, proposed by the first rank
//   joined       -> counter; the rank that makes it reach `size` sets "ready" to "ok"
//   ready        -> "ok", or "error: <reason>" written by the rank that found a problem, so every
//                   waiting rank fails at once with that reason instead of at the timeout
//   settings/<r> -> rank r's settings card (agreed_settings.h)                  (connect_all)
//   addr/<r>     -> rank r's links card: host, CPUs and transport addresses (transport_choice.h)
//   read         -> counter of ranks that have read every card and address
//   kept         -> counter of ranks that left before `read` reached `size` (leave_store)
//   finished     -> counter of ranks that destroyed their communicator (the store's server
//                   stays up until it reaches `size`, bounded); the serving rank adds 2^32 + 1
// The failure board's keys (failure_board.h) are written only after a failure, and stay.
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
// `limit` names what set `timeout`, in the messages.
Result<JoinResult> join_through_store(std::shared_ptr<Store> store, int rank, int size, int generation,
                                      std::chrono::milliseconds timeout,
                                      const std::string& limit = "BRAID_RENDEZVOUS_TIMEOUT_S");

// Waits until every rank but `rank` has set `<kind>/<r>` in `ns` (a communicator's namespace),
// up to ns.timeout(), saying every ~10 s which ranks have not, as the join does. `what` names
// the keys for people ("transport address"). A timeout error names the missing ranks.
Status wait_for_ranks(Store& ns, const std::string& kind, const std::string& what, int rank, int size);

// Rank `rank` leaves the communicator whose namespace is `ns` (its communicator is destroyed):
// counts itself in `finished` and deletes what nobody will read again. Its own keys go as it
// leaves when every rank has read them; the last rank to leave deletes the shared ones (and
// the own keys of ranks that left too early to delete theirs). `lingering`: this rank serves
// the store, which ends with this communicator, and waits for everyone_left(): the shared keys
// then stay (deleting `finished` under its poll would only bring it back).
// Returns how many ranks have left, this one included. Throws braid::Error when the store is gone.
int64_t leave_store(Store& ns, int rank, int size, bool lingering);
// Whether all `size` ranks have left (a lingering rank polls this).
bool everyone_left(Store& ns, int size);

}  // namespace braid
