#include "tests/collectives/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "collectives/kernels/half_float.h"

namespace braid::collectives::testing {

namespace {
template <typename T>
T load(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void store(void* base, size_t i, T v) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &v, sizeof(T));
}
uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}
}  // namespace

double get(DType t, const void* b, size_t i) {
  switch (t) {
    case DType::f32: return load<float>(b, i);
    case DType::f64: return load<double>(b, i);
    case DType::f16: return f16_to_f32(load<uint16_t>(b, i));
    case DType::bf16: return bf16_to_f32(load<uint16_t>(b, i));
    case DType::i8: return load<int8_t>(b, i);
    case DType::u8: return load<uint8_t>(b, i);
    case DType::i32: return load<int32_t>(b, i);
    case DType::i64: return static_cast<double>(load<int64_t>(b, i));
  }
  return 0;
}

void put(DType t, void* b, size_t i, double v) {
  switch (t) {
    case DType::f32: return store<float>(b, i, static_cast<float>(v));
    case DType::f64: return store<double>(b, i, v);
    case DType::f16: return store<uint16_t>(b, i, f32_to_f16(static_cast<float>(v)));
    case DType::bf16: return store<uint16_t>(b, i, f32_to_bf16(static_cast<float>(v)));
    case DType::i8: return store<int8_t>(b, i, static_cast<int8_t>(v));
    case DType::u8: return store<uint8_t>(b, i, static_cast<uint8_t>(v));
    case DType::i32: return store<int32_t>(b, i, static_cast<int32_t>(v));
    case DType::i64: return store<int64_t>(b, i, static_cast<int64_t>(v));
  }
}

double input_value(DType t, Op op, int rank, size_t i) {
  const uint64_t h = mix((static_cast<uint64_t>(rank) << 40) ^ i ^ (static_cast<uint64_t>(op) << 56));
  const bool is_unsigned = t == DType::u8;
  if (is_bitwise(op)) return static_cast<double>(h % 128);  // fits every integer type
  if (op == Op::prod) {
    if (rank < 3 && h % 4 == 0) return 2;
    return (!is_unsigned && (h >> 8) % 2 == 0) ? -1 : 1;
  }
  return is_unsigned ? static_cast<double>(h % 7) : static_cast<double>(h % 7) - 3;
}

double reduce_reference(DType t, Op op, const std::vector<double>& v) {
  if (is_bitwise(op)) {
    int64_t acc = static_cast<int64_t>(v[0]);
    for (size_t k = 1; k < v.size(); ++k) {
      const int64_t x = static_cast<int64_t>(v[k]);
      acc = op == Op::band ? (acc & x) : op == Op::bor ? (acc | x) : (acc ^ x);
    }
    return static_cast<double>(acc);
  }
  double acc = v[0];
  for (size_t k = 1; k < v.size(); ++k) {
    switch (op) {
      case Op::sum:
      case Op::avg: acc += v[k]; break;
      case Op::prod: acc *= v[k]; break;
      case Op::min: acc = std::min(acc, v[k]); break;
      case Op::max: acc = std::max(acc, v[k]); break;
      default: break;
    }
  }
  if (op == Op::avg) acc = is_floating(t) ? acc / static_cast<double>(v.size()) : std::trunc(acc / static_cast<double>(v.size()));
  return acc;
}

double tolerance(DType t, Op op, double want) {
  if (op != Op::avg || !is_floating(t)) return 0;
  const double mag = std::max(1.0, std::fabs(want));
  switch (t) {
    case DType::f16: return 2e-3 * mag;
    case DType::bf16: return 1.6e-2 * mag;
    case DType::f32: return 1e-6 * mag;
    default: return 1e-12 * mag;
  }
}

}  // namespace braid::collectives::testing
