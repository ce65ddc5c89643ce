// tools/braid_perf/perf_check.h - one rank's inputs and expected results, computed once per size.
//
// braid-perf restores its inputs before every iteration and checks every result (-c 1), like
// the anchors in ../shared/bench, which memcpy from a template and compare in a tight loop.
// Doing that element by element through perf_data's functions was slow enough at 1 MiB
// (docs/code_figures.md, "braid-perf") that the ranks reached the next iteration's barrier far
// apart and the timed operation began with a rank still waking up. So both the
// input and the expected result are computed once per size, here; an iteration copies one and
// compares against the other, falling back to the per-element tolerance only where bytes differ.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/types.h"

namespace braid::perf {

struct Expected {
  // What the buffer braid-perf fills holds before each iteration: the receive buffer for
  // operations that work in place (all_reduce, broadcast), else the send buffer.
  std::vector<char> input;
  bool input_in_recv = false;
  // What the receive buffer must hold from its start after the operation; empty when this rank
  // has no result to check (a non-root rank of reduce or gather, barrier).
  std::vector<char> result;
  bool reduced = false;  // result is a reduction (tolerance of the op), else moved data (exact)
};

// For `op` (a braid-perf --op name) on rank r of n, `count` elements per call (the unit the
// call takes), dtype dt, reduction redop, root `root`.
Expected expected_for(const std::string& op, int n, int r, int root, size_t count, DType dt, Op redop);

// Elements of `got` (e.result.size() bytes) that differ from e.result beyond the tolerance of
// redop for dt (exactly, for moved data).
int64_t count_wrong(const void* got, const Expected& e, DType dt, Op redop);

}  // namespace braid::perf
