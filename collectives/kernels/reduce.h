// collectives/kernels/reduce.h - the dtype x op reduction kernels every algorithm calls.
//
// Contracts (all kernels): `count` elements, pointers may be unaligned, dst may equal a or b
// (in-place), ranges otherwise do not overlap. f16 and bf16 are reduced in f32 and rounded to
// nearest-even. Bitwise ops on floating types are a caller bug (checked before any op starts).
// avg is never passed here: algorithms reduce with sum and call scale() once at the end.
#pragma once

#include <cstddef>

#include "braid/types.h"

namespace braid::collectives {

// dst[i] = dst[i] op src[i]
void reduce_into(void* dst, const void* src, size_t count, DType dtype, Op op);
// dst[i] = a[i] op b[i]   (recv-reduce-copy: the result lands in a third buffer)
void reduce_to(void* dst, const void* a, const void* b, size_t count, DType dtype, Op op);
// dst[i] = dst[i] * factor, computed in the type (f32 for f16/bf16) and rounded; integers
// are divided exactly by 1/factor when factor = 1/n (avg of integers truncates toward zero).
void scale(void* dst, size_t count, DType dtype, double factor);
// The identity of op (0 for sum, 1 for prod, +inf/max for min, ...) written into count elements.
void fill_identity(void* dst, size_t count, DType dtype, Op op);

}  // namespace braid::collectives
