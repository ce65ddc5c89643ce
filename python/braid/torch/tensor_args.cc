#include "tensor_args.h"

#include <stdexcept>

#include "process_group.h"

namespace braid::torch_backend {

namespace {

[[noreturn]] void refuse(const std::string& message) { throw std::runtime_error("braid backend: " + message); }

}  // namespace

size_t elements(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

void check_one(size_t n, const char* op, const char* what) {
  if (n != 1) {
    refuse(std::string(op) + ": expected one tensor in " + what + ", got " + std::to_string(n) +
           " (the braid backend takes one CPU tensor per process, like gloo)");
  }
}

braid::DType to_dtype(const at::Tensor& t, const char* op) {
  if (!t.device().is_cpu()) {
    refuse(std::string(op) + ": tensor on " + t.device().str() +
           ", but this build of the braid backend takes CPU tensors only: move it with .cpu()");
  }
  if (t.layout() != at::kStrided) refuse(std::string(op) + ": sparse tensors are not supported; use .to_dense()");
  switch (t.scalar_type()) {
    case at::kFloat: return braid::DType::f32;
    case at::kDouble: return braid::DType::f64;
    case at::kHalf: return braid::DType::f16;
    case at::kBFloat16: return braid::DType::bf16;
    case at::kChar: return braid::DType::i8;
    case at::kByte: return braid::DType::u8;
    case at::kBool: return braid::DType::u8;
    case at::kInt: return braid::DType::i32;
    case at::kLong: return braid::DType::i64;
    default: break;
  }
  refuse(std::string(op) + ": dtype " + c10::toString(t.scalar_type()) +
         " is not supported by braid (it has float32/64, float16, bfloat16, int8, uint8, int32, int64, bool); "
         "convert the tensor, e.g. int16 to int32");
}

braid::Op to_op(const c10d::ReduceOp& op, at::ScalarType type, const char* name) {
  const bool is_bool = type == at::kBool;
  const bool is_float = at::isFloatingType(type);
  const auto bitwise_check = [&](const char* what) {
    if (is_float) {
      refuse(std::string(name) + ": ReduceOp." + what + " needs integer or bool tensors, got " + c10::toString(type));
    }
  };
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return is_bool ? braid::Op::max : braid::Op::sum;
    case c10d::ReduceOp::AVG:
      if (is_bool) refuse(std::string(name) + ": ReduceOp.AVG of bool tensors has no meaning; use a float dtype");
      return braid::Op::avg;
    case c10d::ReduceOp::PRODUCT: return is_bool ? braid::Op::min : braid::Op::prod;
    case c10d::ReduceOp::MIN: return braid::Op::min;
    case c10d::ReduceOp::MAX: return braid::Op::max;
    case c10d::ReduceOp::BAND: bitwise_check("BAND"); return is_bool ? braid::Op::min : braid::Op::band;
    case c10d::ReduceOp::BOR: bitwise_check("BOR"); return is_bool ? braid::Op::max : braid::Op::bor;
    case c10d::ReduceOp::BXOR: bitwise_check("BXOR"); return braid::Op::bxor;
    default: break;
  }
  refuse(std::string(name) + ": this ReduceOp (PREMUL_SUM or another NCCL-only op) is not supported by braid; "
         "use SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR or BXOR");
}

at::Tensor usable(const at::Tensor& t, BraidWork& work, bool written, const char* op) {
  (void)to_dtype(t, op);
  if (t.is_contiguous()) return t;
  at::Tensor staged = t.contiguous();
  work.keep(staged);
  if (written) {
    work.add_finish_step([t, staged]() mutable { t.copy_(staged); });
  }
  return staged;
}

at::Tensor packed(const std::vector<at::Tensor>& parts, BraidWork& work, bool read, bool written, const char* op) {
  int64_t total = 0;
  for (const auto& p : parts) total += p.numel();
  const auto options = parts.empty() ? at::TensorOptions() : parts.front().options();
  at::Tensor flat = at::empty({total}, options.memory_format(c10::nullopt));
  int64_t at = 0;
  for (const auto& p : parts) {
    (void)to_dtype(p, op);
    if (read) flat.narrow(0, at, p.numel()).copy_(p.reshape({-1}));
    at += p.numel();
  }
  work.keep(flat);
  if (written) {
    work.add_finish_step([parts, flat]() mutable {
      int64_t off = 0;
      for (auto& p : parts) {
        p.copy_(flat.narrow(0, off, p.numel()).view(p.sizes()));
        off += p.numel();
      }
    });
  }
  return flat;
}

void check_same_dtype(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* op, const char* what) {
  for (const auto& t : ts) {
    (void)to_dtype(t, op);
    if (t.scalar_type() != like.scalar_type()) {
      refuse(std::string(op) + ": every tensor in " + what + " must have dtype " + c10::toString(like.scalar_type()) +
             ", one has " + c10::toString(t.scalar_type()));
    }
  }
}

}  // namespace braid::torch_backend
