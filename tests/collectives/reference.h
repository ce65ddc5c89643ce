// tests/collectives/reference.h - typed element access, test inputs and the reference results.
//
// Inputs are small integers (bit patterns for bitwise ops, +-1/2 for prod) so that every
// result is exact in every dtype, f16 and bf16 included, except avg on floats, which is
// compared with a per-dtype tolerance (tolerance()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "braid/types.h"

namespace braid::collectives::testing {

// One element as a double (integers exactly: inputs stay far below 2^53).
double get(DType t, const void* base, size_t i);
void put(DType t, void* base, size_t i, double v);

// The value rank `rank` contributes at element `i` (of the whole input) for `op`.
double input_value(DType t, Op op, int rank, size_t i);

// op over the values of all ranks, as the library defines it (avg = sum / n; integer avg
// truncates toward zero), rounded into `t` the way put() stores it.
double reduce_reference(DType t, Op op, const std::vector<double>& values);

// Allowed |got - want| for `t` and `op`: 0 except avg on floating types.
double tolerance(DType t, Op op, double want);

}  // namespace braid::collectives::testing
