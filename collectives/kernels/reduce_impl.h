// collectives/kernels/reduce_impl.h - the loops behind reduce.h, compiled once per ISA.
//
// reduce_generic.cc and reduce_avx2.cc each include this file inside their own namespace and
// are compiled with different -m flags; reduce.cc picks one at run time. Nothing here
// branches per element: each loop is written so the compiler vectorizes it (check with
// `objdump -d` for ymm registers in the avx2 object, or run bench/collectives/reduce_bench).
//
// Pointers reaching here are aligned to their element size (reduce.cc bounces unaligned
// ones through aligned blocks), and dst is either equal to a source or disjoint from both,
// which is what makes __restrict honest: the in-place loops take dst and the other source.
#ifndef BRAID_KERNEL_NS
#error "define BRAID_KERNEL_NS before including reduce_impl.h"
#endif

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "braid/types.h"
#include "collectives/kernels/half_float.h"

namespace braid::collectives::BRAID_KERNEL_NS {

// Integer sum and prod wrap: computed on the unsigned type, where overflow is defined.
template <typename T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

struct SumFn {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    else return a + b;
  }
};
struct ProdFn {
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    else return a * b;
  }
};
// min and max propagate NaN (a NaN in either input gives NaN), as torch does.
struct MinFn {
  template <typename T> T operator()(T a, T b) const { return (a < b || a != a) ? a : b; }
};
struct MaxFn {
  template <typename T> T operator()(T a, T b) const { return (a > b || a != a) ? a : b; }
};
struct BandFn {
  template <typename T> T operator()(T a, T b) const { return static_cast<T>(a & b); }
};
struct BorFn {
  template <typename T> T operator()(T a, T b) const { return static_cast<T>(a | b); }
};
struct BxorFn {
  template <typename T> T operator()(T a, T b) const { return static_cast<T>(a ^ b); }
};

// dst[i] = f(dst[i], src[i]), or f(src[i], dst[i]) when dst stood for the second operand.
template <bool kDstIsSecond, typename T, typename F>
void loop_inplace(T* __restrict dst, const T* __restrict src, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) dst[i] = kDstIsSecond ? f(src[i], dst[i]) : f(dst[i], src[i]);
}

template <typename T, typename F>
void loop_out(T* __restrict dst, const T* __restrict a, const T* __restrict b, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
}

template <typename T, typename F>
void reduce_native(void* dst, const void* a, const void* b, size_t n, F f) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (d == x) loop_inplace<false>(d, y, n, f);
  else if (d == y) loop_inplace<true>(d, x, n, f);
  else loop_out(d, x, y, n, f);
}

struct F16 {
  static float to(uint16_t h) { return f16_to_f32(h); }
  static uint16_t from(float f) { return f32_to_f16(f); }
};
struct BF16 {
  static float to(uint16_t h) { return bf16_to_f32(h); }
  static uint16_t from(float f) { return f32_to_bf16(f); }
};

// Blocks of kHalfBlock elements go to f32 stack buffers, are reduced there and rounded back;
// both sources are read before dst is written, so dst may be either of them.
constexpr size_t kHalfBlock = 64;

template <typename Conv, typename F>
void reduce_half_block(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n, F f) {
  float fa[kHalfBlock], fb[kHalfBlock];
  for (size_t j = 0; j < n; ++j) fa[j] = Conv::to(a[j]);
  for (size_t j = 0; j < n; ++j) fb[j] = Conv::to(b[j]);
  for (size_t j = 0; j < n; ++j) fa[j] = f(fa[j], fb[j]);
  for (size_t j = 0; j < n; ++j) d[j] = Conv::from(fa[j]);
}

template <typename Conv, typename F>
void reduce_half(void* dst, const void* a, const void* b, size_t n, F f) {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  // Full blocks have a compile-time trip count, which is what the vectorizer likes best.
  for (; i + kHalfBlock <= n; i += kHalfBlock) {
    float fa[kHalfBlock], fb[kHalfBlock];
    for (size_t j = 0; j < kHalfBlock; ++j) fa[j] = Conv::to(x[i + j]);
    for (size_t j = 0; j < kHalfBlock; ++j) fb[j] = Conv::to(y[i + j]);
    for (size_t j = 0; j < kHalfBlock; ++j) fa[j] = f(fa[j], fb[j]);
    for (size_t j = 0; j < kHalfBlock; ++j) d[i + j] = Conv::from(fa[j]);
  }
  if (i < n) reduce_half_block<Conv>(d + i, x + i, y + i, n - i, f);
}

// bf16 needs no block buffers: a 32-bit word holds two of them, and each half widens to f32
// with a mask or a shift, so the whole loop is lane-wise 32-bit arithmetic with no shuffles.
// kDst says which operand dst is (0: neither, 1: a, 2: b), keeping __restrict truthful.
template <int kDst, typename F>
void bf16_pairs(uint16_t* __restrict d, const uint16_t* __restrict p, const uint16_t* __restrict q, size_t pairs,
                F f) {
  const uint16_t* a = kDst == 1 ? d : p;
  const uint16_t* b = kDst == 1 ? p : kDst == 2 ? d : q;
  for (size_t j = 0; j < pairs; ++j) {
    uint32_t wa, wb;
    std::memcpy(&wa, a + 2 * j, 4);
    std::memcpy(&wb, b + 2 * j, 4);
    const float lo = f(std::bit_cast<float>(wa << 16), std::bit_cast<float>(wb << 16));
    const float hi = f(std::bit_cast<float>(wa & 0xffff0000u), std::bit_cast<float>(wb & 0xffff0000u));
    const uint32_t out = (f32_to_bf16_high(hi) & 0xffff0000u) | (f32_to_bf16_high(lo) >> 16);
    std::memcpy(d + 2 * j, &out, 4);
  }
}

template <typename F>
void reduce_bf16(void* dst, const void* a, const void* b, size_t n, F f) {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  const size_t pairs = n / 2;
  if (d == x) bf16_pairs<1>(d, y, nullptr, pairs, f);
  else if (d == y) bf16_pairs<2>(d, x, nullptr, pairs, f);
  else bf16_pairs<0>(d, x, y, pairs, f);
  if (n % 2 != 0) d[n - 1] = f32_to_bf16(f(bf16_to_f32(x[n - 1]), bf16_to_f32(y[n - 1])));
}

template <typename F>
void reduce_typed(void* dst, const void* a, const void* b, size_t n, DType dtype, F f) {
  switch (dtype) {
    case DType::f32: return reduce_native<float>(dst, a, b, n, f);
    case DType::f64: return reduce_native<double>(dst, a, b, n, f);
    case DType::f16: return reduce_half<F16>(dst, a, b, n, f);
    case DType::bf16: return reduce_bf16(dst, a, b, n, f);
    case DType::i8: return reduce_native<int8_t>(dst, a, b, n, f);
    case DType::u8: return reduce_native<uint8_t>(dst, a, b, n, f);
    case DType::i32: return reduce_native<int32_t>(dst, a, b, n, f);
    case DType::i64: return reduce_native<int64_t>(dst, a, b, n, f);
  }
}

// Bitwise ops act on the bit patterns: floating types are a caller bug (reduce.h), and an
// unsigned type of the same width gives them a defined, harmless meaning.
template <typename F>
void reduce_bits(void* dst, const void* a, const void* b, size_t n, DType dtype, F f) {
  switch (dtype_size(dtype)) {
    case 1: return reduce_native<uint8_t>(dst, a, b, n, f);
    case 2: return reduce_native<uint16_t>(dst, a, b, n, f);
    case 4: return reduce_native<uint32_t>(dst, a, b, n, f);
    default: return reduce_native<uint64_t>(dst, a, b, n, f);
  }
}

void reduce_to(void* dst, const void* a, const void* b, size_t n, DType dtype, Op op) {
  switch (op) {
    case Op::sum: case Op::avg: return reduce_typed(dst, a, b, n, dtype, SumFn{});
    case Op::prod: return reduce_typed(dst, a, b, n, dtype, ProdFn{});
    case Op::min: return reduce_typed(dst, a, b, n, dtype, MinFn{});
    case Op::max: return reduce_typed(dst, a, b, n, dtype, MaxFn{});
    case Op::band: return reduce_bits(dst, a, b, n, dtype, BandFn{});
    case Op::bor: return reduce_bits(dst, a, b, n, dtype, BorFn{});
    case Op::bxor: return reduce_bits(dst, a, b, n, dtype, BxorFn{});
  }
}

template <typename T>
void scale_native(void* dst, size_t n, T factor) {
  T* d = static_cast<T*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = d[i] * factor;
}

template <typename Conv>
void scale_half(void* dst, size_t n, float factor) {
  auto* d = static_cast<uint16_t*>(dst);
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = n - i < kHalfBlock ? n - i : kHalfBlock;
    float f[kHalfBlock];
    for (size_t j = 0; j < m; ++j) f[j] = Conv::to(d[i + j]) * factor;
    for (size_t j = 0; j < m; ++j) d[i + j] = Conv::from(f[j]);
  }
}

// Floating types only; reduce.cc handles integers (a division, which no ISA vectorizes).
void scale_float(void* dst, size_t n, DType dtype, double factor) {
  switch (dtype) {
    case DType::f32: return scale_native<float>(dst, n, static_cast<float>(factor));
    case DType::f64: return scale_native<double>(dst, n, factor);
    case DType::f16: return scale_half<F16>(dst, n, static_cast<float>(factor));
    case DType::bf16: return scale_half<BF16>(dst, n, static_cast<float>(factor));
    default: return;
  }
}

}  // namespace braid::collectives::BRAID_KERNEL_NS
