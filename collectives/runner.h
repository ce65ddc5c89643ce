// collectives/runner.h - preparing one collective for a caller that drives it (the runtime's
// progress engine and the collectives tests, both through runtime/links/peer_links.h's loop):
//
//   auto prepared = prepare_collective(args, rank, size, caps, peers, options);  // nothing sent yet
//   prepared->executor->progress(); ... on_completion(c) for each polled completion ...
//   on failure: close the connections of executor->busy_peers() and drain what they held.
//
// Messages pair by their order on a connection, so on one set of connections an operation
// posts only after the previous one posted all of its own (preparing early is fine: prepare
// posts nothing).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "collectives/executor.h"

namespace braid::collectives {

struct PreparedCollective {
  Algo algo = Algo::automatic;          // what runs (never automatic)
  std::string name;                     // "all_reduce (ring)"
  std::unique_ptr<Executor> executor;   // null: nothing to move (count 0, world size 1 in place)
  std::vector<int> peers;               // ranks the schedule sends to or receives from, ascending
  size_t segment_bytes = 0;             // the Plan's pipelining settings: ranks must agree on them
  size_t ring_depth = 1;
};

// Validates (invalid_argument before anything is sent), selects or checks the forced
// algorithm, builds the schedule and the executor. Posts nothing.
Result<PreparedCollective> prepare_collective(const CollectiveArgs& args, int rank, int size,
                                              const transport::Capabilities& caps,
                                              const std::vector<transport::Connection*>& peers,
                                              const RunOptions& options);

}  // namespace braid::collectives
