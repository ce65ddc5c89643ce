// collectives/runner.cc - prepare, drive and abandon one collective (see runner.h).
#include "collectives/runner.h"

#include <algorithm>
#include <chrono>

#include "collectives/algorithms.h"
#include "collectives/validate.h"
#include "common/log.h"

namespace braid::collectives {

namespace {

constexpr auto kPollSlice = std::chrono::milliseconds(100);
// After a failure: how long we wait for closed connections to hand back their operations.
constexpr auto kDrainBound = std::chrono::seconds(2);

}  // namespace

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

Status drive_to_completion(Executor& ex, transport::Transport& transport, const RunOptions& options,
                           const std::string& where) {
  std::vector<transport::Completion> done;
  RETURN_IF_ERROR(ex.progress());
  while (!ex.done()) {
    if (options.deadline.expired()) {
      return timeout_error(where + "did not finish before its deadline (op id " + std::to_string(options.op_id) +
                           "); still waiting for " + ex.waiting_for() +
                           ". A peer may be stuck, dead or calling a different collective; BRAID_TIMEOUT_S sets "
                           "the bound.");
    }
    done.clear();
    const auto wait = std::min<std::chrono::nanoseconds>(options.deadline.remaining(), kPollSlice);
    Status polled = transport.poll(done, std::chrono::duration_cast<std::chrono::microseconds>(wait));
    if (!polled.is_ok()) return polled.with_context(where);
    // Every completion of the batch is handed over, even after a failure, so the executor's
    // count of outstanding operations stays true for abandon().
    Status first;
    for (const auto& c : done) {
      bool ours = false;
      Status s = ex.on_completion(c, &ours);
      if (!s.is_ok() && first.is_ok()) first = s;
      if (!ours) {
        BRAID_LOG(info) << where << "dropped a completion of another operation (cookie " << c.cookie << ")";
      }
    }
    RETURN_IF_ERROR(first);
    RETURN_IF_ERROR(ex.progress());
  }
  return Status::ok();
}

void abandon(Executor& ex, transport::Transport& transport, const std::vector<transport::Connection*>& peers) {
  for (int peer : ex.busy_peers()) {
    if (peer >= 0 && static_cast<size_t>(peer) < peers.size() && peers[static_cast<size_t>(peer)] != nullptr) {
      peers[static_cast<size_t>(peer)]->close();
    }
  }
  const Deadline bound = Deadline::after(kDrainBound);
  std::vector<transport::Completion> done;
  while (ex.outstanding() > 0 && !bound.expired()) {
    done.clear();
    if (!transport.poll(done, std::chrono::milliseconds(10)).is_ok()) break;
    for (const auto& c : done) (void)ex.on_completion(c);
  }
}

}  // namespace braid::collectives
