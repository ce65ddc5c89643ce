// collectives/algorithms.h - which algorithm implements which collective, and building its
// schedule from a CollectiveArgs. The one table every other part (selection, prepare_collective,
// the schedule simulator tests) looks algorithms up in.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "collectives/schedule.h"

namespace braid::collectives {

// The segment size used when RunOptions::chunk_bytes is 0.
inline constexpr size_t kDefaultSegmentBytes = size_t{256} << 10;
// The same for send and recv of `bytes`, which have no reduction to pipeline against: the
// message in at most kP2pSegments segments (the executor's window for send/recv, so it is all
// posted at once), none smaller than kDefaultSegmentBytes. A transport that moves a large
// message in one copy straight between the two buffers (shm's cross-memory attach) pays a
// hand-off per message, which 256 KiB segments do not amortise (docs/shm.md, "64 MiB sendrecv").
inline constexpr size_t kP2pSegments = 8;
inline size_t p2p_segment_bytes(size_t bytes) {
  const size_t per = (bytes + kP2pSegments - 1) / kP2pSegments;
  return per < kDefaultSegmentBytes ? kDefaultSegmentBytes : per;
}

// Whether `algo` implements `kind` (automatic: always).
bool supports(Kind kind, Algo algo);
// "ring, rd, tree" - for error messages.
std::string supported_algorithms(Kind kind);
// The display name of what runs: "all_reduce (ring)", "barrier (dissemination)".
std::string operation_name(Kind kind, Algo algo);

// The algorithm's input, from one rank's view of the call. segment_bytes 0: the default.
// In place: all_reduce, reduce and all_to_all with send == recv. all_gather/gather in place
// (send points at this rank's block of recv) and reduce_scatter/scatter in place (recv points
// at this rank's block of send), as NCCL defines them, need nothing special: the local copy
// of this rank's block finds source and destination equal and is skipped.
// `order`: the ring order (Plan::order); null or the identity: rank order.
Plan make_plan(const CollectiveArgs& args, int rank, int size, size_t segment_bytes, size_t ring_depth = 1,
               std::shared_ptr<const std::vector<int>> order = nullptr);
// This rank's schedule, in the plan's ring order where the collective follows one. `algo` must be concrete and supported (invalid_argument otherwise).
Result<Schedule> build_schedule(const CollectiveArgs& args, Algo algo, const Plan& plan);

}  // namespace braid::collectives
