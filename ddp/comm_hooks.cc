// The built-in hooks: plain averaging, and compression to a 16-bit float on the wire.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "braid/ddp/comm_hook.h"
#include "braid/error.h"
#include "ddp/half_convert.h"

namespace braid::ddp {
namespace {

class AverageHook final : public CommHook {
 public:
  std::string name() const override { return "average"; }
  Work start(Communicator& comm, const BucketView& bucket) override {
    return comm.all_reduce_async(bucket.data, bucket.count, DType::f32, Op::avg);
  }
  void finish(Communicator&, const BucketView&) override {}
};

class CompressHook final : public CommHook {
 public:
  CompressHook(DType wire, CompressedReduce reduce) : wire_(wire), reduce_(reduce) {}

  std::string name() const override {
    return std::string(wire_ == DType::f16 ? "f16" : "bf16") + "_compress_" +
           (reduce_ == CompressedReduce::avg ? "avg" : "sum_then_scale");
  }

  Work start(Communicator& comm, const BucketView& bucket) override {
    // Scratch per bucket index: a bucket's reduction may still be in flight while the next
    // bucket starts, so they cannot share one buffer. Resized when a rebuild changes sizes.
    std::vector<uint16_t>& wire = scratch_[bucket.index];
    wire.resize(bucket.count);
    if (wire_ == DType::f16)
      narrow_to_f16(bucket.data, wire.data(), bucket.count);
    else
      narrow_to_bf16(bucket.data, wire.data(), bucket.count);
    const Op op = reduce_ == CompressedReduce::avg ? Op::avg : Op::sum;
    return comm.all_reduce_async(wire.data(), bucket.count, wire_, op);
  }

  void finish(Communicator& comm, const BucketView& bucket) override {
    const std::vector<uint16_t>& wire = scratch_.at(bucket.index);
    if (wire_ == DType::f16)
      widen_from_f16(wire.data(), bucket.data, bucket.count);
    else
      widen_from_bf16(wire.data(), bucket.data, bucket.count);
    if (reduce_ == CompressedReduce::sum_then_scale) {
      const float scale = 1.0f / static_cast<float>(comm.size());
      for (size_t i = 0; i < bucket.count; ++i) bucket.data[i] *= scale;
    }
  }

 private:
  DType wire_;
  CompressedReduce reduce_;
  std::map<size_t, std::vector<uint16_t>> scratch_;
};

}  // namespace

std::shared_ptr<CommHook> average_hook() { return std::make_shared<AverageHook>(); }

std::shared_ptr<CommHook> compress_hook(DType wire, CompressedReduce reduce) {
  if (wire != DType::f16 && wire != DType::bf16) {
    throw Error(ErrorCode::invalid_argument,
                std::string("compress_hook: the wire dtype must be f16 or bf16, not ") + to_string(wire));
  }
  return std::make_shared<CompressHook>(wire, reduce);
}

}  // namespace braid::ddp
