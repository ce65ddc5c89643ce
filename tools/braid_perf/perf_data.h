// tools/braid_perf/perf_data.h - inputs whose results are known exactly, and their check.
//
// Every input element is a small integer, chosen so that any summation order gives the same
// exact result in every dtype (sums stay below 2^8 for bf16, products are powers of two);
// only avg divides, so floating avg is checked with a per-dtype tolerance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "braid/types.h"

namespace braid::perf {

// The value rank `r` contributes at element `i` for reduction `op` (also used, with op = sum,
// as the identifying value of data that is only moved).
double input_value(int r, size_t i, Op op);
// The expected reduction over ranks 0..n-1 at element i, in the arithmetic of `dtype`.
double expected_reduction(int n, size_t i, DType dtype, Op op);

void store_value(void* buf, size_t i, DType dtype, double v);
double load_value(const void* buf, size_t i, DType dtype);
// Fills buf[0..count) with input_value(r, offset + k, op).
void fill_input(void* buf, size_t count, DType dtype, int r, size_t offset, Op op);
// True when `got` is the expected value within dtype's tolerance for `op`.
bool close_enough(double got, double want, DType dtype, Op op);
// A hash of the raw bytes, to check that every rank holds bitwise the same result.
int64_t hash_bytes(const void* buf, size_t bytes);

}  // namespace braid::perf
