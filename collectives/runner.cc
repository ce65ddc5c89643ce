// collectives/runner.cc - prepare one collective (see runner.h).
#include "collectives/runner.h"

#include <algorithm>

#include "collectives/algorithms.h"
#include "collectives/validate.h"

namespace braid::collectives {

Result<PreparedCollective> prepare_collective(const CollectiveArgs& args, int rank, int size,
                                              const transport::Capabilities& caps,
                                              const std::vector<transport::Connection*>& peers,
                                              const RunOptions& options) {
  RETURN_IF_ERROR(validate_collective(args, rank, size));
  PreparedCollective out;
  out.algo = select_algorithm(args, rank, size, options.algo);
  if (!supports(args.kind, out.algo)) {
    return invalid_argument(std::string(to_string(args.kind)) + " on rank " + std::to_string(rank) +
                            ": algorithm " + to_string(out.algo) + " (BRAID_ALGO) does not implement " +
                            to_string(args.kind) + "; it has: " + supported_algorithms(args.kind) +
                            " (or use auto)");
  }
  out.name = operation_name(args.kind, out.algo);
  const Plan plan = make_plan(args, rank, size, options.chunk_bytes, options.ring_depth, options.order);
  out.segment_bytes = plan.segment_bytes;
  out.ring_depth = plan.ring_depth;
  ASSIGN_OR_RETURN(Schedule schedule, build_schedule(args, out.algo, plan));
  if (schedule.steps.empty()) return out;
  ExecutorOptions eo;
  eo.name = out.name;
  eo.rank = rank;
  eo.op_id = options.op_id;
  eo.dtype = args.dtype;
  eo.op = args.op == Op::avg ? Op::sum : args.op;
  // A step in flight holds one operation on one connection at a time.
  eo.window = std::max<size_t>(2, std::min(schedule.window, caps.max_in_flight));
  // Read before the executor takes the steps; Executor::create checks that every peer named is
  // a valid rank with a connection (an error there discards this).
  for (const Step& st : schedule.steps) {
    for (int peer : {st.has_recv() ? st.recv_peer : -1, st.has_send() ? st.send_peer : -1}) {
      if (peer >= 0 && peer < size && peer != rank) out.peers.push_back(peer);
    }
  }
  std::sort(out.peers.begin(), out.peers.end());
  out.peers.erase(std::unique(out.peers.begin(), out.peers.end()), out.peers.end());
  ASSIGN_OR_RETURN(out.executor, Executor::create(std::move(schedule), args.send, args.recv, peers, std::move(eo)));
  return out;
}

}  // namespace braid::collectives
