#include <cstring>

#include "braid/types.h"

namespace braid {

const char* to_string(DType t) noexcept {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

const char* to_string(Op op) noexcept {
  switch (op) {
    case Op::sum: return "sum";
    case Op::prod: return "prod";
    case Op::min: return "min";
    case Op::max: return "max";
    case Op::avg: return "avg";
    case Op::band: return "band";
    case Op::bor: return "bor";
    case Op::bxor: return "bxor";
  }
  return "?";
}

bool parse_dtype(const char* name, DType* out) noexcept {
  struct Alias { const char* name; DType t; };
  static constexpr Alias kAliases[] = {
      {"f32", DType::f32},   {"float", DType::f32},  {"float32", DType::f32}, {"f64", DType::f64},
      {"double", DType::f64}, {"float64", DType::f64}, {"f16", DType::f16},   {"half", DType::f16},
      {"float16", DType::f16}, {"bf16", DType::bf16},  {"bfloat16", DType::bf16}, {"i8", DType::i8},
      {"int8", DType::i8},   {"u8", DType::u8},      {"uint8", DType::u8},    {"i32", DType::i32},
      {"int32", DType::i32}, {"int", DType::i32},    {"i64", DType::i64},     {"int64", DType::i64},
  };
  for (const Alias& a : kAliases) {
    if (std::strcmp(a.name, name) == 0) {
      *out = a.t;
      return true;
    }
  }
  return false;
}

bool parse_op(const char* name, Op* out) noexcept {
  for (int i = 0; i < kNumOps; ++i) {
    Op op = static_cast<Op>(i);
    if (std::strcmp(to_string(op), name) == 0) {
      *out = op;
      return true;
    }
  }
  return false;
}

}  // namespace braid
