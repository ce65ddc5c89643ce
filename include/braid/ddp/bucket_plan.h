// braid/ddp/bucket_plan.h - which gradients travel together in one all_reduce.
//
// A bucket is a flat run of gradients of one dtype, reduced with one collective. Few large
// buckets amortize the per-collective cost; small early buckets let the first all_reduce start
// while backward is still producing the rest. Gradients appear roughly in reverse registration
// order (the last layer's first), so that is the default order buckets are filled in; after one
// training step the Reducer re-plans with the order they really arrived in.
//
// Planning is pure: sizes in, layout out, no memory and no communication.
#pragma once

#include <cstddef>
#include <vector>

#include "braid/types.h"

namespace braid::ddp {

// One parameter as the planner sees it: how many elements its gradient has, and their type.
struct ParamSpec {
  size_t count = 0;
  DType dtype = DType::f32;
};

struct BucketOptions {
  // Cap of the first bucket (per dtype): small, so the first collective starts early.
  size_t first_bucket_bytes = size_t{1} << 20;
  // Cap of every later bucket. A bucket closes as soon as it reaches its cap, so it may exceed
  // it by one parameter; a parameter larger than the cap gets a bucket of its own.
  size_t bucket_bytes = size_t{25} << 20;
};

// A parameter's place in a bucket. Offsets and counts are in elements of the bucket's dtype.
struct BucketSlot {
  size_t param = 0;   // index in registration order
  size_t offset = 0;  // first element inside the bucket
  size_t count = 0;
};

struct Bucket {
  DType dtype = DType::f32;
  std::vector<BucketSlot> slots{};  // in fill order; offsets are contiguous from 0
  size_t count = 0;                 // elements in the bucket: the sum of the slots' counts
  size_t bytes() const { return count * dtype_size(dtype); }
};

// Where parameter i lives: buckets[bucket].slots[slot].
struct SlotRef {
  size_t bucket = 0;
  size_t slot = 0;
};

struct BucketPlan {
  std::vector<Bucket> buckets{};  // in launch order
  std::vector<SlotRef> where{};   // indexed by parameter (registration order)
};

// Places every parameter in exactly one bucket. `order` lists the parameters in the order their
// gradients are expected to be ready (each index once); empty means reverse registration order.
// Buckets are kept per dtype (a collective has one dtype) and returned in the order their first
// parameter appears in `order`, which is the order they fill up during backward.
// Throws braid::Error(invalid_argument) when `order` is not a permutation of the parameters or
// a cap is zero.
BucketPlan assign_buckets(const std::vector<ParamSpec>& params, const BucketOptions& options = {},
                          const std::vector<size_t>& order = {});

}  // namespace braid::ddp
