#include "tools/braid_perf/perf_data.h"

#include <cmath>
#include <cstring>

namespace braid::perf {
namespace {

// f16 and bf16 here only hold small integers and their averages: a plain conversion with
// round-to-nearest-even is enough.
uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_to_f32(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  float a = std::fabs(f);
  if (a == 0) return static_cast<uint16_t>(sign);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00);
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;    // a = 1.f * 2^exp
  if (exp < -14) {    // subnormal: units of 2^-24
    auto m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));
    return static_cast<uint16_t>(sign | m);
  }
  auto m = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, 10 - exp)));  // 1024..2048
  if (m == 2048) {
    m = 1024;
    ++exp;
  }
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(exp + 15) << 10 | (m - 1024));
}

float f16_to_f32(uint16_t h) {
  int exp = (h >> 10) & 0x1f;
  int man = h & 0x3ff;
  float v = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
            : exp == 31 ? INFINITY
                        : std::ldexp(static_cast<float>(man + 1024), exp - 25);
  return (h & 0x8000) ? -v : v;
}

// Wraps an exact integer result to the width of `dtype`, as the kernels' arithmetic does.
double wrap(int64_t v, DType dtype) {
  switch (dtype) {
    case DType::i8: return static_cast<int8_t>(v);
    case DType::u8: return static_cast<uint8_t>(v);
    case DType::i32: return static_cast<int32_t>(v);
    default: return static_cast<double>(v);
  }
}

}  // namespace

double input_value(int r, size_t i, Op op) {
  auto k = static_cast<int64_t>((static_cast<size_t>(r) * 3 + i) % 1021);
  switch (op) {
    case Op::prod: return 1 + (k % 2);
    case Op::min: case Op::max: return k % 29;
    case Op::band: case Op::bor: case Op::bxor: return (k * 37) & 0x7f;
    default: return k % 4;
  }
}

double expected_reduction(int n, size_t i, DType dtype, Op op) {
  auto v0 = static_cast<int64_t>(input_value(0, i, op));
  int64_t acc = v0;
  for (int r = 1; r < n; ++r) {
    auto v = static_cast<int64_t>(input_value(r, i, op));
    switch (op) {
      case Op::sum: case Op::avg: acc += v; break;
      case Op::prod: acc *= v; break;
      case Op::min: acc = std::min(acc, v); break;
      case Op::max: acc = std::max(acc, v); break;
      case Op::band: acc &= v; break;
      case Op::bor: acc |= v; break;
      case Op::bxor: acc ^= v; break;
    }
  }
  if (op == Op::avg) {
    if (is_floating(dtype)) return static_cast<double>(acc) / n;
    return wrap(acc / n, dtype);
  }
  return wrap(acc, dtype);
}

void store_value(void* buf, size_t i, DType dtype, double v) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(buf)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(buf)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::bf16: static_cast<uint16_t*>(buf)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::i8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DType::i32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DType::i64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
  }
}

double load_value(const void* buf, size_t i, DType dtype) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(buf)[i];
    case DType::f64: return static_cast<const double*>(buf)[i];
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(buf)[i]);
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(buf)[i]);
    case DType::i8: return static_cast<const int8_t*>(buf)[i];
    case DType::u8: return static_cast<const uint8_t*>(buf)[i];
    case DType::i32: return static_cast<const int32_t*>(buf)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
  }
  return 0;
}

void fill_input(void* buf, size_t count, DType dtype, int r, size_t offset, Op op) {
  for (size_t k = 0; k < count; ++k) store_value(buf, k, dtype, input_value(r, offset + k, op));
}

bool close_enough(double got, double want, DType dtype, Op op) {
  if (op != Op::avg || !is_floating(dtype)) return got == want;
  double tol = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-6 : dtype == DType::f16 ? 1e-3 : 8e-3;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

int64_t hash_bytes(const void* buf, size_t bytes) {
  // FNV-1a over 8-byte words (a byte at a time was slow: docs/code_figures.md), then the tail bytes.
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(buf);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

}  // namespace braid::perf
