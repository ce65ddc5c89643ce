// braid/ddp/model_sync.h - make every rank start from the same model.
#pragma once

#include <cstddef>
#include <vector>

#include "braid/communicator.h"
#include "braid/types.h"

namespace braid::ddp {

// Any tensor the program owns: parameters, buffers (running statistics), optimizer state.
struct TensorRef {
  void* data = nullptr;
  size_t count = 0;  // elements of dtype
  DType dtype = DType::f32;
};

// Copies root's tensors to every rank. Tensors are packed into flat buffers of at most
// `bucket_bytes` (per dtype) so a model of many small tensors costs a few collectives, not one
// each. Every rank must pass tensors of the same counts and dtypes, in the same order; call
// verify_same_layout first when unsure. Blocking; throws braid::Error on failure.
void broadcast_coalesced(Communicator& comm, const std::vector<TensorRef>& tensors, int root = 0,
                         size_t bucket_bytes = size_t{25} << 20);

// Checks that every rank registered the same number of tensors with the same counts and dtypes
// (an all_gather of a short fingerprint). Throws braid::Error(mismatch) on every rank, naming a
// rank that differs from rank 0, instead of letting a later collective fail obscurely.
void verify_same_layout(Communicator& comm, const std::vector<TensorRef>& tensors);

}  // namespace braid::ddp
