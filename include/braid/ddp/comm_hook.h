// braid/ddp/comm_hook.h - what the Reducer does with a bucket whose gradients are all ready.
//
// A hook turns one bucket of f32 gradients, summed locally, into the average over every rank of
// the communicator. start() launches the communication and returns its Work; once that Work has
// completed, finish() leaves the averaged f32 values in the bucket. Hooks are called in bucket
// order, at most one bucket of a Reducer at a time in start() (under the Reducer's lock), and a
// bucket's finish() only after its start(). One hook object may serve one Reducer.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "braid/communicator.h"
#include "braid/types.h"
#include "braid/work.h"

namespace braid::ddp {

// One bucket's gradients, flat. `index` is stable until the Reducer rebuilds its buckets;
// `data` stays valid (and must not be touched by anyone else) from start() to finish().
struct BucketView {
  size_t index = 0;
  float* data = nullptr;
  size_t count = 0;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  virtual Work start(Communicator& comm, const BucketView& bucket) = 0;
  virtual void finish(Communicator& comm, const BucketView& bucket) = 0;
};

// all_reduce in f32 with Op::avg, in place: the default.
std::shared_ptr<CommHook> average_hook();

// How a compressed bucket is reduced on the wire.
enum class CompressedReduce {
  avg,             // all_reduce(Op::avg) in the wire dtype
  sum_then_scale,  // all_reduce(Op::sum) in the wire dtype, then * 1/size in f32 after widening
};

// Halves the bytes on the wire: the bucket is rounded to `wire` (DType::f16 or DType::bf16,
// nearest even), reduced in that type, and widened back to f32. f16 overflows above 65504 (sums
// of large gradients with sum_then_scale), bf16 keeps f32's range with 8 bits of mantissa.
// Throws braid::Error(invalid_argument) for any other dtype.
std::shared_ptr<CommHook> compress_hook(DType wire, CompressedReduce reduce = CompressedReduce::avg);

}  // namespace braid::ddp
