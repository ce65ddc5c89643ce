// tests/collectives/kernels/reference.h - the slow, obviously-right reductions the kernels are
// checked against. Independent of the library: f16 goes through the compiler's _Float16, bf16
// is rounded by comparing distances in double, integers by modular arithmetic on uint64_t.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "braid/types.h"

namespace braid::collectives::reference {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Nearest bf16 by distance, ties to the even mantissa; NaN in, NaN out.
inline uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);  // toward zero
  if ((u & 0xffffu) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // away from zero (may become inf)
  const double dl = std::fabs(static_cast<double>(f) - bf16_to_float(lo));
  const double dh = std::fabs(static_cast<double>(bf16_to_float(hi)) - static_cast<double>(f));
  if ((hi & 0x7fffu) == 0x7f80u) {
    // Past the largest finite bf16 the distance to "infinity" is measured to 2^128.
    const double top = std::ldexp(1.0, 128);
    const double d_inf = top - std::fabs(static_cast<double>(f));
    return dl < d_inf || (dl == d_inf && (lo & 1) == 0) ? lo : hi;
  }
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) == 0 ? lo : hi;
}

inline float f16_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
inline uint16_t float_to_f16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }

template <typename T>
T apply(Op op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Op::sum: case Op::avg: return a + b;
      case Op::prod: return a * b;
      case Op::min: return std::isnan(a) || std::isnan(b) ? NAN : (a < b ? a : b);
      case Op::max: return std::isnan(a) || std::isnan(b) ? NAN : (a > b ? a : b);
      default: return NAN;
    }
  } else {
    const uint64_t x = static_cast<uint64_t>(a), y = static_cast<uint64_t>(b);
    switch (op) {
      case Op::sum: case Op::avg: return static_cast<T>(x + y);
      case Op::prod: return static_cast<T>(x * y);
      case Op::min: return a < b ? a : b;
      case Op::max: return a > b ? a : b;
      case Op::band: return static_cast<T>(x & y);
      case Op::bor: return static_cast<T>(x | y);
      case Op::bxor: return static_cast<T>(x ^ y);
    }
    return 0;
  }
}

template <typename T>
T load(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void store(uint8_t* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

inline std::vector<uint8_t> reduce(DType dtype, Op op, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                                   size_t count) {
  std::vector<uint8_t> out(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DType::f32: store(out.data(), i, apply(op, load<float>(a.data(), i), load<float>(b.data(), i))); break;
      case DType::f64: store(out.data(), i, apply(op, load<double>(a.data(), i), load<double>(b.data(), i))); break;
      case DType::f16:
        store(out.data(), i, float_to_f16(apply(op, f16_to_float(load<uint16_t>(a.data(), i)),
                                                f16_to_float(load<uint16_t>(b.data(), i)))));
        break;
      case DType::bf16:
        store(out.data(), i, float_to_bf16(apply(op, bf16_to_float(load<uint16_t>(a.data(), i)),
                                                 bf16_to_float(load<uint16_t>(b.data(), i)))));
        break;
      case DType::i8: store(out.data(), i, apply(op, load<int8_t>(a.data(), i), load<int8_t>(b.data(), i))); break;
      case DType::u8: store(out.data(), i, apply(op, load<uint8_t>(a.data(), i), load<uint8_t>(b.data(), i))); break;
      case DType::i32: store(out.data(), i, apply(op, load<int32_t>(a.data(), i), load<int32_t>(b.data(), i))); break;
      case DType::i64: store(out.data(), i, apply(op, load<int64_t>(a.data(), i), load<int64_t>(b.data(), i))); break;
    }
  }
  return out;
}

// Random inputs: integers use every bit; floats are spread over [-100, 100] (products stay
// finite in f16) with an infinity or NaN now and then, so special values are swept too.
inline std::vector<uint8_t> random_values(DType dtype, Op op, size_t count, std::mt19937_64& rng) {
  (void)op;
  std::vector<uint8_t> out(count * dtype_size(dtype));
  std::uniform_real_distribution<double> real(-100.0, 100.0);
  const double specials[] = {INFINITY, -INFINITY, NAN, 65504.0, 1e-6};
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = rng();
    double v = real(rng);
    if (v == 0.0) v = 1.0;
    if (bits % 97 == 0) v = specials[(bits >> 8) % 5];
    switch (dtype) {
      case DType::f32: store(out.data(), i, static_cast<float>(v)); break;
      case DType::f64: store(out.data(), i, v); break;
      case DType::f16: store(out.data(), i, float_to_f16(static_cast<float>(v))); break;
      case DType::bf16: store(out.data(), i, float_to_bf16(static_cast<float>(v))); break;
      default: std::memcpy(out.data() + i * dtype_size(dtype), &bits, dtype_size(dtype)); break;
    }
  }
  return out;
}

inline bool is_nan(DType dtype, const uint8_t* p, size_t i) {
  switch (dtype) {
    case DType::f32: return std::isnan(load<float>(p, i));
    case DType::f64: return std::isnan(load<double>(p, i));
    case DType::f16: return (load<uint16_t>(p, i) & 0x7fffu) > 0x7c00u;
    case DType::bf16: return (load<uint16_t>(p, i) & 0x7fffu) > 0x7f80u;
    default: return false;
  }
}

// "" when equal (any NaN equals any NaN), else where and how the first element differs.
inline std::string first_difference(DType dtype, const uint8_t* want, const uint8_t* got, size_t count) {
  const size_t es = dtype_size(dtype);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(want + i * es, got + i * es, es) == 0) continue;
    if (is_nan(dtype, want, i) && is_nan(dtype, got, i)) continue;
    uint64_t w = 0, g = 0;
    std::memcpy(&w, want + i * es, es);
    std::memcpy(&g, got + i * es, es);
    std::ostringstream s;
    s << "element " << i << " of " << count << ": want bits 0x" << std::hex << w << ", got 0x" << g;
    return s.str();
  }
  return "";
}

}  // namespace braid::collectives::reference
