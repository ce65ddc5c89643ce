// collectives/kernels/cuda/reduce_cuda.h - reductions on CUDA device memory.
//
// Built only with the `cuda` feature (nvcc from /usr/local/cuda, architectures from the
// gpu_archs option). The runtime reduces staged chunks with them (runtime/device/staging_pipeline.h,
// BRAID_CUDA_REDUCE) through runtime/device/cuda_device_api.cc.
#pragma once

#include <cstddef>

#include "braid/types.h"

namespace braid::collectives {

// dst[i] = dst[i] op src[i] on device memory, with the contract of reduce_into in
// kernels/reduce.h: the same results bit for bit (NaN payloads aside), pointers may be
// unaligned (slower), dst may equal src. avg reduces as sum (the caller scales once).
// Asynchronous on `stream` (a cudaStream_t passed as void*, so that this header needs no CUDA
// header; nullptr is the legacy default stream); both buffers must stay valid until the stream
// reaches this point. Returns 0 (cudaSuccess), or a cudaError_t: cudaErrorInvalidValue for a
// bitwise op (band, bor, bxor) on a floating dtype or an unknown dtype or op - checked before
// anything is launched, whatever the count - else the error of the launch.
int cuda_reduce_into(void* dst, const void* src, size_t count, DType dtype, Op op, void* stream);

// Loads every reduction kernel into the current device's context by launching each once on an
// empty range (on a stream of its own, waited for). CUDA loads kernels lazily by default (since
// 12.2), and loading one may wait for all work on the GPU: launched for the first time while a
// stream is held by a host function that waits for this very reduction, it would never return.
// So the runtime calls this before it holds any stream. Returns 0 or a cudaError_t.
int cuda_reduce_load();

}  // namespace braid::collectives
