// collectives/runner.h - run_collective in three parts, for a caller that drives operations
// itself (the runtime's progress engine, which may poll one transport for several of them).
//
//   auto prepared = prepare_collective(args, rank, size, caps, peers, options);  // nothing sent yet
//   prepared->executor->progress(); ... on_completion(c) for each polled completion ...
//   on failure: abandon(*prepared->executor, transport, peers);
//
// run_collective() is exactly prepare + drive_to_completion + abandon on failure.
// One operation at a time on a set of connections: messages pair by their order on a
// connection, so a second operation may start only when the first is done() on this rank
// (preparing it early is fine: prepare posts nothing).
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

// Drives `ex` with transport.poll() until done or options.deadline; the timeout names the
// operation, this rank and the peers still awaited. `where` is "<name> on rank R: ".
Status drive_to_completion(Executor& ex, transport::Transport& transport, const RunOptions& options,
                           const std::string& where);

// After a failure: closes the connections that still hold operations of `ex` (their message
// order is lost anyway) and waits, bounded, for the transport to hand those operations back,
// so the buffers they point into may be freed.
void abandon(Executor& ex, transport::Transport& transport, const std::vector<transport::Connection*>& peers);

}  // namespace braid::collectives
