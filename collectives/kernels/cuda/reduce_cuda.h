// collectives/kernels/cuda/reduce_cuda.h - reductions on CUDA device memory.
//
// Built only with the `cuda` feature (nvcc from /usr/local/cuda, architectures from the
// gpu_archs option). The same contract as kernels/reduce.h, for device pointers, asynchronous on
// `stream` (a cudaStream_t passed as void* so that this header needs no CUDA header). Returns 0
// or the cudaError_t of the launch. Not yet called by the runtime: CUDA buffers are a later step.
#pragma once

#include <cstddef>

#include "braid/types.h"

namespace braid::collectives {

// dst[i] = dst[i] op src[i] for f32, f64, f16, bf16 (sum, prod, min, max) and i32/i64/u8/i8.
int cuda_reduce_into(void* dst, const void* src, size_t count, DType dtype, Op op, void* stream);

}  // namespace braid::collectives
