// tools/braid_perf/perf_measure.h - one row of braid-perf: a size, dtype, reduction and root,
// timed out of place and in place.
//
// Method. Blocking (-z 1, the default, the same as ../shared/bench's anchors so figures compare
// like for like): each iteration restores the inputs (untimed), meets the other ranks at a
// barrier and times one group of -m operations; per iteration, ranks' times are combined by -a
// (max by default) and the row shows the median. Back to back (-z 0, nccl-tests' default): one
// barrier, then every iteration issued at once and waited for together; the row shows the mean.
// Then -c checked iterations compare each rank's result with its exact expected value, and
// results every rank holds must be bitwise equal on all of them.
#pragma once

#include <braid/braid.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/braid_perf/perf_options.h"

namespace braid::perf {

// One column group: out-of-place or in-place.
struct Timing {
  bool ran = false;    // false: this form does not exist for the operation (N/A)
  double time_us = 0;  // per operation
  double algbw = 0;    // GB/s
  double busbw = 0;
  int64_t wrong = -1;  // -1: not checked (-c 0)
};

struct Row {
  size_t bytes = 0;  // the larger of the send and receive sizes, as nccl-tests prints
  size_t count = 0;  // elements of the whole message
  DType dtype = DType::f32;
  Op redop = Op::sum;
  int root = -1;     // -1: the operation has no root
  std::string algo;  // what braid ran (last_algorithm())
  Timing out_of_place, in_place;
};

// Elements per call for a message of `bytes` (split operations: per rank; rounded down).
size_t per_rank_count(const std::string& op, size_t bytes, size_t esize, int n);
// busbw / algbw, as nccl-tests defines it.
double bus_factor(const std::string& op, int n);

Row measure_row(Communicator& comm, const PerfOptions& opt, size_t bytes, DType dtype, Op redop, int root);

}  // namespace braid::perf
