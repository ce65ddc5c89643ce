// runtime/engine/pending_op.h - one queued operation: what the caller asked for, its Work, and
// the numbers every rank gives it alike.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/collective.h"
#include "runtime/device/device_staging.h"
#include "runtime/work_state.h"

namespace braid {

struct PendingOp {
  collectives::CollectiveArgs args;
  std::shared_ptr<detail::WorkState> work;
  uint64_t seq = 0;        // issue order on this communicator
  uint64_t match_seq = 0;  // see op_header.h
  std::vector<PendingOp> group{};  // group_start() ... group_end(): the members (this one has no args)
  std::unique_ptr<DeviceStaging> device{};  // set when a buffer is on a GPU (args point at pinned copies)
};

}  // namespace braid
