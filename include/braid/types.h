// braid/types.h - element types and reduction operations of the public API.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid {

enum class DType : uint8_t { f32, f64, f16, bf16, i8, u8, i32, i64 };
enum class Op : uint8_t { sum, prod, min, max, avg, band, bor, bxor };

inline constexpr int kNumDTypes = 8;
inline constexpr int kNumOps = 8;

constexpr size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i8: case DType::u8: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) noexcept {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

constexpr bool is_bitwise(Op op) noexcept { return op == Op::band || op == Op::bor || op == Op::bxor; }

const char* to_string(DType t) noexcept;
const char* to_string(Op op) noexcept;
// Parse "f32", "float", "bf16", ...; returns false when the name is unknown.
bool parse_dtype(const char* name, DType* out) noexcept;
bool parse_op(const char* name, Op* out) noexcept;

}  // namespace braid
