// Element-wise reductions on device memory; f16/bf16 are reduced in f32, as on the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "collectives/kernels/cuda/reduce_cuda.h"

namespace braid::collectives {
namespace {

template <typename T> __device__ float widen(T v) { return static_cast<float>(v); }
template <> __device__ float widen<__half>(__half v) { return __half2float(v); }
template <> __device__ float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ T narrow(float v) { return static_cast<T>(v); }
template <> __device__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T, typename A>
__device__ A apply(A a, A b, Op op) {
  switch (op) {
    case Op::prod: return a * b;
    case Op::min: return a < b ? a : b;
    case Op::max: return a > b ? a : b;
    default: return a + b;  // sum (avg is a sum here, scaled once by the caller)
  }
}

// Full-width types compute in their own type; halves compute in f32.
template <typename T, typename A>
__global__ void reduce_kernel(T* dst, const T* src, size_t count, Op op) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if constexpr (sizeof(A) == sizeof(T)) {
      dst[i] = apply<T, A>(dst[i], src[i], op);
    } else {
      dst[i] = narrow<T>(apply<T, A>(widen(dst[i]), widen(src[i]), op));
    }
  }
}

template <typename T, typename A>
int launch(void* dst, const void* src, size_t count, Op op, cudaStream_t stream) {
  if (count == 0) return 0;
  constexpr unsigned kThreads = 256;
  size_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;  // grid-stride loop covers the rest
  reduce_kernel<T, A><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<T*>(dst),
                                                                             static_cast<const T*>(src), count, op);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int cuda_reduce_into(void* dst, const void* src, size_t count, DType dtype, Op op, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::f32: return launch<float, float>(dst, src, count, op, s);
    case DType::f64: return launch<double, double>(dst, src, count, op, s);
    case DType::f16: return launch<__half, float>(dst, src, count, op, s);
    case DType::bf16: return launch<__nv_bfloat16, float>(dst, src, count, op, s);
    case DType::i32: return launch<int32_t, int32_t>(dst, src, count, op, s);
    case DType::i64: return launch<int64_t, int64_t>(dst, src, count, op, s);
    case DType::i8: return launch<int8_t, int8_t>(dst, src, count, op, s);
    case DType::u8: return launch<uint8_t, uint8_t>(dst, src, count, op, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace braid::collectives
