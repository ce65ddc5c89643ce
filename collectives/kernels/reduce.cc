#include "collectives/kernels/reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "collectives/kernels/kernel_isa.h"

namespace braid::collectives {

// The per-ISA builds of reduce_impl.h.
namespace generic {
void reduce_to(void* dst, const void* a, const void* b, size_t n, DType dtype, Op op);
void scale_float(void* dst, size_t n, DType dtype, double factor);
}  // namespace generic
#if BRAID_KERNELS_AVX2
namespace avx2 {
void reduce_to(void* dst, const void* a, const void* b, size_t n, DType dtype, Op op);
void scale_float(void* dst, size_t n, DType dtype, double factor);
}  // namespace avx2
#endif
#if BRAID_KERNELS_AVX512
namespace avx512 {
void reduce_to(void* dst, const void* a, const void* b, size_t n, DType dtype, Op op);
void scale_float(void* dst, size_t n, DType dtype, double factor);
}  // namespace avx512
#endif

namespace {

bool cpu_has(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::generic: return true;
    case KernelIsa::avx2:
#if BRAID_KERNELS_AVX2
      return __builtin_cpu_supports("avx2");
#else
      return false;
#endif
    case KernelIsa::avx512:
#if BRAID_KERNELS_AVX512
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
      return false;
#endif
  }
  return false;
}

KernelIsa& active() {
  static KernelIsa isa = cpu_has(KernelIsa::avx512) ? KernelIsa::avx512
                         : cpu_has(KernelIsa::avx2) ? KernelIsa::avx2
                                                    : KernelIsa::generic;
  return isa;
}

void run_reduce(void* dst, const void* a, const void* b, size_t n, DType dtype, Op op) {
#if BRAID_KERNELS_AVX512
  if (active() == KernelIsa::avx512) return avx512::reduce_to(dst, a, b, n, dtype, op);
#endif
#if BRAID_KERNELS_AVX2
  if (active() == KernelIsa::avx2) return avx2::reduce_to(dst, a, b, n, dtype, op);
#endif
  generic::reduce_to(dst, a, b, n, dtype, op);
}

void run_scale_float(void* dst, size_t n, DType dtype, double factor) {
#if BRAID_KERNELS_AVX512
  if (active() == KernelIsa::avx512) return avx512::scale_float(dst, n, dtype, factor);
#endif
#if BRAID_KERNELS_AVX2
  if (active() == KernelIsa::avx2) return avx2::scale_float(dst, n, dtype, factor);
#endif
  generic::scale_float(dst, n, dtype, factor);
}

bool aligned(const void* p, size_t alignment) { return reinterpret_cast<uintptr_t>(p) % alignment == 0; }

// Unaligned buffers (legal, if rare: a byte offset into a packed message) take a detour through
// aligned blocks, so the loops may assume element alignment. A whole block of each source is
// read before dst's block is written, which keeps dst == a or dst == b correct.
constexpr size_t kBounceBytes = 4096;

void reduce_bounced(void* dst, const void* a, const void* b, size_t n, DType dtype, Op op) {
  const size_t es = dtype_size(dtype);
  const size_t per_block = kBounceBytes / es;
  alignas(64) unsigned char x[kBounceBytes];
  alignas(64) unsigned char y[kBounceBytes];
  for (size_t i = 0; i < n; i += per_block) {
    const size_t m = n - i < per_block ? n - i : per_block;
    const size_t off = i * es;
    std::memcpy(x, static_cast<const unsigned char*>(a) + off, m * es);
    std::memcpy(y, static_cast<const unsigned char*>(b) + off, m * es);
    run_reduce(x, x, y, m, dtype, op);
    std::memcpy(static_cast<unsigned char*>(dst) + off, x, m * es);
  }
}

template <typename T>
void scale_integer(void* dst, size_t n, double factor) {
  using U = std::make_unsigned_t<T>;
  auto* bytes = static_cast<unsigned char*>(dst);
  const double inverse = 1.0 / factor;
  // avg of n integers arrives as factor 1/n: divide by n, truncating like C's '/'.
  if (std::isfinite(inverse) && inverse >= 0.5) {
    const long long divisor = std::llround(inverse);
    if (divisor == 1) return;
    for (size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, bytes + i * sizeof(T), sizeof(T));
      v = static_cast<T>(static_cast<long long>(v) / divisor);
      std::memcpy(bytes + i * sizeof(T), &v, sizeof(T));
    }
    return;
  }
  // Anything else (factor > 2, negative): multiply by the rounded factor, wrapping.
  const U k = static_cast<U>(std::llround(factor));
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes + i * sizeof(T), sizeof(T));
    v = static_cast<T>(static_cast<U>(static_cast<U>(v) * k));
    std::memcpy(bytes + i * sizeof(T), &v, sizeof(T));
  }
}

template <typename T>
void fill(void* dst, size_t n, T value) {
  auto* bytes = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) std::memcpy(bytes + i * sizeof(T), &value, sizeof(T));
}

// Identity of min (the largest value) or max (the smallest) for a type.
template <typename T>
void fill_extreme(void* dst, size_t n, bool largest) {
  if constexpr (std::numeric_limits<T>::has_infinity) {
    fill<T>(dst, n, largest ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity());
  } else {
    fill<T>(dst, n, largest ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest());
  }
}

}  // namespace

const char* to_string(KernelIsa isa) noexcept {
  switch (isa) {
    case KernelIsa::generic: return "generic";
    case KernelIsa::avx2: return "avx2";
    case KernelIsa::avx512: return "avx512";
  }
  return "?";
}

KernelIsa active_kernel_isa() noexcept { return active(); }

bool set_kernel_isa(KernelIsa isa) noexcept {
  if (!cpu_has(isa)) return false;
  active() = isa;
  return true;
}

void reduce_to(void* dst, const void* a, const void* b, size_t count, DType dtype, Op op) {
  if (count == 0) return;
  const size_t es = dtype_size(dtype);
  if (aligned(dst, es) && aligned(a, es) && aligned(b, es)) {
    run_reduce(dst, a, b, count, dtype, op);
  } else {
    reduce_bounced(dst, a, b, count, dtype, op);
  }
}

void reduce_into(void* dst, const void* src, size_t count, DType dtype, Op op) {
  reduce_to(dst, dst, src, count, dtype, op);
}

void scale(void* dst, size_t count, DType dtype, double factor) {
  if (count == 0) return;
  switch (dtype) {
    case DType::i8: return scale_integer<int8_t>(dst, count, factor);
    case DType::u8: return scale_integer<uint8_t>(dst, count, factor);
    case DType::i32: return scale_integer<int32_t>(dst, count, factor);
    case DType::i64: return scale_integer<int64_t>(dst, count, factor);
    default: break;
  }
  const size_t es = dtype_size(dtype);
  if (aligned(dst, es)) return run_scale_float(dst, count, dtype, factor);
  alignas(64) unsigned char block[kBounceBytes];
  const size_t per_block = kBounceBytes / es;
  for (size_t i = 0; i < count; i += per_block) {
    const size_t m = count - i < per_block ? count - i : per_block;
    unsigned char* p = static_cast<unsigned char*>(dst) + i * es;
    std::memcpy(block, p, m * es);
    run_scale_float(block, m, dtype, factor);
    std::memcpy(p, block, m * es);
  }
}

void fill_identity(void* dst, size_t count, DType dtype, Op op) {
  if (count == 0) return;
  const size_t bytes = count * dtype_size(dtype);
  if (op == Op::sum || op == Op::avg || op == Op::bor || op == Op::bxor) {
    std::memset(dst, 0, bytes);  // all-zero bits are 0 (or +0.0) in every dtype
    return;
  }
  if (op == Op::band) {
    std::memset(dst, 0xff, bytes);
    return;
  }
  const bool largest = op == Op::min;
  switch (dtype) {
    case DType::f32: return op == Op::prod ? fill<float>(dst, count, 1.0f) : fill_extreme<float>(dst, count, largest);
    case DType::f64: return op == Op::prod ? fill<double>(dst, count, 1.0) : fill_extreme<double>(dst, count, largest);
    case DType::f16:
      return fill<uint16_t>(dst, count, op == Op::prod ? uint16_t{0x3c00} : largest ? uint16_t{0x7c00} : uint16_t{0xfc00});
    case DType::bf16:
      return fill<uint16_t>(dst, count, op == Op::prod ? uint16_t{0x3f80} : largest ? uint16_t{0x7f80} : uint16_t{0xff80});
    case DType::i8: return op == Op::prod ? fill<int8_t>(dst, count, 1) : fill_extreme<int8_t>(dst, count, largest);
    case DType::u8: return op == Op::prod ? fill<uint8_t>(dst, count, 1) : fill_extreme<uint8_t>(dst, count, largest);
    case DType::i32: return op == Op::prod ? fill<int32_t>(dst, count, 1) : fill_extreme<int32_t>(dst, count, largest);
    case DType::i64: return op == Op::prod ? fill<int64_t>(dst, count, 1) : fill_extreme<int64_t>(dst, count, largest);
  }
}

}  // namespace braid::collectives
