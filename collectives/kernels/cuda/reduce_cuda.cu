// Element-wise reductions on device memory, with the host kernels' semantics (reduce.h):
// integer sum and prod wrap, min and max propagate NaN, f16/bf16 are reduced in f32 and
// rounded to nearest-even, avg is a sum (the caller scales once at the end).
//
// Three ways to reach memory, chosen per call from the pointers:
//   vector  - dst and src both 16-byte aligned: each thread moves 16 bytes at a time (one
//             128-bit load per operand), which is what keeps 1- and 2-byte types at memory
//             speed; the count % (16 / size) elements left over are done one by one.
//   element - both aligned to the element size: one typed load per element.
//   bytes   - anything else (a byte offset into a packed message): tiles are copied byte by
//             byte into shared memory and reduced there. Rare and slow, but correct, as on
//             the host.
// Every kernel is a grid-stride loop, so a grid capped at kMaxBlocks covers any count.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "collectives/kernels/cuda/reduce_cuda.h"

namespace braid::collectives {
namespace {

constexpr unsigned kThreads = 256;
constexpr size_t kMaxBlocks = 4096;
constexpr size_t kVectorBytes = 16;

// Integer sum and prod are computed on an unsigned type, where overflow wraps by definition.
template <typename T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct SumFn {
  template <typename T> __device__ T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    else return a + b;
  }
};
struct ProdFn {
  template <typename T> __device__ T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    else return a * b;
  }
};
// The host's expressions exactly: a NaN in either input gives NaN, and of +0/-0 the second wins.
struct MinFn {
  template <typename T> __device__ T operator()(T a, T b) const { return (a < b || a != a) ? a : b; }
};
struct MaxFn {
  template <typename T> __device__ T operator()(T a, T b) const { return (a > b || a != a) ? a : b; }
};
struct BandFn {
  template <typename T> __device__ T operator()(T a, T b) const { return static_cast<T>(a & b); }
};
struct BorFn {
  template <typename T> __device__ T operator()(T a, T b) const { return static_cast<T>(a | b); }
};
struct BxorFn {
  template <typename T> __device__ T operator()(T a, T b) const { return static_cast<T>(a ^ b); }
};

// Halves are stored as their 16 bits and reduced in f32; other types in themselves.
struct F16Bits {};
struct BF16Bits {};
template <typename Tag> struct Storage { using type = Tag; };
template <> struct Storage<F16Bits> { using type = uint16_t; };
template <> struct Storage<BF16Bits> { using type = uint16_t; };

template <typename Tag, typename Fn>
struct Combine {
  using T = typename Storage<Tag>::type;
  __device__ T operator()(T a, T b) const {
    if constexpr (std::is_same_v<Tag, F16Bits>) {
      const float r = Fn{}(__half2float(__ushort_as_half(a)), __half2float(__ushort_as_half(b)));
      return __half_as_ushort(__float2half_rn(r));
    } else if constexpr (std::is_same_v<Tag, BF16Bits>) {
      const float r = Fn{}(__bfloat162float(__ushort_as_bfloat16(a)), __bfloat162float(__ushort_as_bfloat16(b)));
      return __bfloat16_as_ushort(__float2bfloat16_rn(r));
    } else {
      return Fn{}(a, b);
    }
  }
};

__device__ size_t first_thread() { return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; }
__device__ size_t grid_threads() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

template <typename T, typename F>
__global__ void reduce_vectors(T* dst, const T* src, size_t count, F f) {
  constexpr size_t kPer = kVectorBytes / sizeof(T);
  const size_t vectors = count / kPer;
  auto* dv = reinterpret_cast<uint4*>(dst);
  const auto* sv = reinterpret_cast<const uint4*>(src);
  for (size_t v = first_thread(); v < vectors; v += grid_threads()) {
    uint4 x = dv[v];
    const uint4 y = sv[v];
    T a[kPer], b[kPer];
    memcpy(a, &x, kVectorBytes);
    memcpy(b, &y, kVectorBytes);
#pragma unroll
    for (size_t k = 0; k < kPer; ++k) a[k] = f(a[k], b[k]);
    memcpy(&x, a, kVectorBytes);
    dv[v] = x;
  }
  for (size_t i = vectors * kPer + first_thread(); i < count; i += grid_threads()) dst[i] = f(dst[i], src[i]);
}

template <typename T, typename F>
__global__ void reduce_elements(T* dst, const T* src, size_t count, F f) {
  for (size_t i = first_thread(); i < count; i += grid_threads()) dst[i] = f(dst[i], src[i]);
}

// Unaligned buffers bounce through shared memory, as the host bounces them through aligned
// stack blocks: a block copies a tile of one element per thread in byte by byte, reduces it
// there with typed (aligned) accesses, and copies it back out. No element is taken apart into
// bytes in a register: when an f16/bf16 result was stored byte by byte, nvcc 13.0 (V13.0.88)
// built sm_90 code that stored the low byte from the wrong register (the widened source
// operand, not the rounded result), and the H100 wrote wrong low bytes (reduce_cuda_test,
// byte_offset cases, 2026-11-22).
template <typename T, typename F>
__global__ void reduce_bytes(unsigned char* dst, const unsigned char* src, size_t count, F f) {
  __shared__ T a[kThreads];
  __shared__ T b[kThreads];
  auto* a_bytes = reinterpret_cast<unsigned char*>(a);
  auto* b_bytes = reinterpret_cast<unsigned char*>(b);
  // The tile loop's bounds are the same for every thread of the block, so all of them reach
  // each barrier.
  for (size_t first = blockIdx.x * size_t{kThreads}; first < count; first += size_t{gridDim.x} * kThreads) {
    const size_t n = count - first < kThreads ? count - first : kThreads;
    unsigned char* d = dst + first * sizeof(T);
    const unsigned char* s = src + first * sizeof(T);
    for (size_t k = threadIdx.x; k < n * sizeof(T); k += kThreads) {
      a_bytes[k] = d[k];
      b_bytes[k] = s[k];
    }
    __syncthreads();
    if (threadIdx.x < n) a[threadIdx.x] = f(a[threadIdx.x], b[threadIdx.x]);
    __syncthreads();
    for (size_t k = threadIdx.x; k < n * sizeof(T); k += kThreads) d[k] = a_bytes[k];
    __syncthreads();  // the next tile overwrites a and b
  }
}

bool aligned(const void* p, size_t alignment) { return reinterpret_cast<uintptr_t>(p) % alignment == 0; }

unsigned blocks_for(size_t work_items) {
  const size_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// `load`: the three kernels are launched on an empty range (each does nothing), whatever the
// pointers, so that CUDA loads them now (cuda_reduce_load).
template <typename Tag, typename Fn>
int launch(void* dst, const void* src, size_t count, cudaStream_t stream, bool load) {
  using T = typename Storage<Tag>::type;
  const Combine<Tag, Fn> f;
  if (load) {
    reduce_vectors<T><<<1, kThreads, 0, stream>>>(nullptr, nullptr, 0, f);
    reduce_elements<T><<<1, kThreads, 0, stream>>>(nullptr, nullptr, 0, f);
    reduce_bytes<T><<<1, kThreads, 0, stream>>>(nullptr, nullptr, 0, f);
  } else if (aligned(dst, kVectorBytes) && aligned(src, kVectorBytes)) {
    constexpr size_t kPer = kVectorBytes / sizeof(T);
    // One work item per vector, at least one thread per leftover element.
    const size_t items = count / kPer > count % kPer ? count / kPer : count % kPer;
    reduce_vectors<T><<<blocks_for(items), kThreads, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src),
                                                                   count, f);
  } else if (aligned(dst, sizeof(T)) && aligned(src, sizeof(T))) {
    reduce_elements<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src),
                                                                    count, f);
  } else {
    reduce_bytes<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<unsigned char*>(dst),
                                                                 static_cast<const unsigned char*>(src), count, f);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename Fn>
int launch_typed(void* dst, const void* src, size_t count, DType dtype, cudaStream_t s, bool load = false) {
  switch (dtype) {
    case DType::f32: return launch<float, Fn>(dst, src, count, s, load);
    case DType::f64: return launch<double, Fn>(dst, src, count, s, load);
    case DType::f16: return launch<F16Bits, Fn>(dst, src, count, s, load);
    case DType::bf16: return launch<BF16Bits, Fn>(dst, src, count, s, load);
    case DType::i8: return launch<int8_t, Fn>(dst, src, count, s, load);
    case DType::u8: return launch<uint8_t, Fn>(dst, src, count, s, load);
    case DType::i32: return launch<int32_t, Fn>(dst, src, count, s, load);
    case DType::i64: return launch<int64_t, Fn>(dst, src, count, s, load);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

// Bitwise ops act on the bit patterns, as on the host; only integer dtypes reach here.
template <typename Fn>
int launch_bits(void* dst, const void* src, size_t count, DType dtype, cudaStream_t s, bool load = false) {
  switch (dtype_size(dtype)) {
    case 1: return launch<uint8_t, Fn>(dst, src, count, s, load);
    case 4: return launch<uint32_t, Fn>(dst, src, count, s, load);
    case 8: return launch<uint64_t, Fn>(dst, src, count, s, load);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

int cuda_reduce_into(void* dst, const void* src, size_t count, DType dtype, Op op, void* stream) {
  // Checked before the count, so that a bad call fails the same way whatever its size.
  const bool known = dtype_size(dtype) != 0 && static_cast<int>(op) < kNumOps;
  if (!known || (is_bitwise(op) && is_floating(dtype))) return static_cast<int>(cudaErrorInvalidValue);
  if (count == 0) return static_cast<int>(cudaSuccess);
  auto s = static_cast<cudaStream_t>(stream);
  switch (op) {
    case Op::sum: case Op::avg: return launch_typed<SumFn>(dst, src, count, dtype, s);
    case Op::prod: return launch_typed<ProdFn>(dst, src, count, dtype, s);
    case Op::min: return launch_typed<MinFn>(dst, src, count, dtype, s);
    case Op::max: return launch_typed<MaxFn>(dst, src, count, dtype, s);
    case Op::band: return launch_bits<BandFn>(dst, src, count, dtype, s);
    case Op::bor: return launch_bits<BorFn>(dst, src, count, dtype, s);
    case Op::bxor: return launch_bits<BxorFn>(dst, src, count, dtype, s);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int cuda_reduce_load() {
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return static_cast<int>(e);
  int status = 0;
  const DType all[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8, DType::u8, DType::i32, DType::i64};
  for (DType d : all) {
    for (int r : {launch_typed<SumFn>(nullptr, nullptr, 0, d, s, true), launch_typed<ProdFn>(nullptr, nullptr, 0, d, s, true),
                  launch_typed<MinFn>(nullptr, nullptr, 0, d, s, true), launch_typed<MaxFn>(nullptr, nullptr, 0, d, s, true)}) {
      if (status == 0) status = r;
    }
    if (is_floating(d)) continue;
    for (int r : {launch_bits<BandFn>(nullptr, nullptr, 0, d, s, true), launch_bits<BorFn>(nullptr, nullptr, 0, d, s, true),
                  launch_bits<BxorFn>(nullptr, nullptr, 0, d, s, true)}) {
      if (status == 0) status = r;
    }
  }
  e = cudaStreamSynchronize(s);
  if (status == 0 && e != cudaSuccess) status = static_cast<int>(e);
  cudaStreamDestroy(s);
  return status;
}

}  // namespace braid::collectives
