// python/braid/torch/tensor_args.h - torch tensors, dtypes and ReduceOps as braid arguments.
//
// Everything braid cannot take is refused here with a RuntimeError naming the operation and
// what to change (int16, complex, CUDA in a build without it, PREMUL_SUM, bitwise ops on
// floats), so no unsupported call reaches the communicator.
#pragma once

#include <braid/braid.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

namespace braid::torch_backend {

class BraidWork;

// braid's element type for a tensor; bool travels as u8 (its bytes are 0 or 1).
braid::DType to_dtype(const at::Tensor& t, const char* op);
// braid's op for torch's on tensors of `type`. On bool tensors SUM, MAX and BOR are a logical
// or (u8 max), PRODUCT, MIN and BAND a logical and (u8 min), as torch's own bool arithmetic.
braid::Op to_op(const c10d::ReduceOp& op, at::ScalarType type, const char* name);

// A contiguous CPU tensor with `t`'s values that braid may read and write: `t` itself when it
// is contiguous, else a copy kept alive by `work` and, when `written`, copied back into `t`
// once the operation succeeded.
at::Tensor usable(const at::Tensor& t, BraidWork& work, bool written, const char* op);

// One contiguous buffer holding `parts` back to back (read: packed now; written: unpacked into
// `parts` when the operation succeeded). Every part must have `dtype`'s scalar type.
at::Tensor packed(const std::vector<at::Tensor>& parts, BraidWork& work, bool read, bool written, const char* op);

// Every tensor in `ts` must be a CPU tensor with `like`'s dtype; `what` names the argument.
void check_same_dtype(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* op, const char* what);
// Exactly one tensor per process, as torch's CPU backends take.
void check_one(size_t n, const char* op, const char* what);

size_t elements(const at::Tensor& t);

}  // namespace braid::torch_backend
