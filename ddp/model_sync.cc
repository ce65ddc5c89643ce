#include "braid/ddp/model_sync.h"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>

#include "braid/ddp/bucket_plan.h"
#include "braid/error.h"

namespace braid::ddp {

void broadcast_coalesced(Communicator& comm, const std::vector<TensorRef>& tensors, int root, size_t bucket_bytes) {
  // Registration order, so the bucketing is the same on every rank without any agreement step.
  std::vector<ParamSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorRef& t : tensors) specs.push_back(ParamSpec{.count = t.count, .dtype = t.dtype});
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const BucketPlan plan =
      assign_buckets(specs, BucketOptions{.first_bucket_bytes = bucket_bytes, .bucket_bytes = bucket_bytes}, order);

  std::vector<unsigned char> staging;
  const bool is_root = comm.rank() == root;
  for (const Bucket& b : plan.buckets) {
    const size_t esize = dtype_size(b.dtype);
    if (b.slots.size() == 1) {  // one tensor: broadcast it where it lies
      comm.broadcast(tensors[b.slots[0].param].data, b.count, b.dtype, root);
      continue;
    }
    staging.resize(b.bytes());
    if (is_root) {
      for (const BucketSlot& s : b.slots) {
        if (s.count) std::memcpy(staging.data() + s.offset * esize, tensors[s.param].data, s.count * esize);
      }
    }
    comm.broadcast(staging.data(), b.count, b.dtype, root);
    if (!is_root) {
      for (const BucketSlot& s : b.slots) {
        if (s.count) std::memcpy(tensors[s.param].data, staging.data() + s.offset * esize, s.count * esize);
      }
    }
  }
}

void verify_same_layout(Communicator& comm, const std::vector<TensorRef>& tensors) {
  // FNV-1a over (count, dtype) of every tensor, with the count of tensors and of elements kept
  // in the clear so the message can say what differs.
  uint64_t hash = 1469598103934665603ULL;
  int64_t elements = 0;
  for (const TensorRef& t : tensors) {
    for (uint64_t word : {static_cast<uint64_t>(t.count), static_cast<uint64_t>(t.dtype)}) {
      hash = (hash ^ word) * 1099511628211ULL;
    }
    elements += static_cast<int64_t>(t.count);
  }
  const int64_t mine[3] = {static_cast<int64_t>(tensors.size()), elements, static_cast<int64_t>(hash)};
  std::vector<int64_t> all(3 * static_cast<size_t>(comm.size()));
  comm.all_gather(mine, all.data(), 3, DType::i64);
  for (int r = 1; r < comm.size(); ++r) {
    const int64_t* theirs = &all[3 * static_cast<size_t>(r)];
    if (theirs[0] != all[0] || theirs[1] != all[1] || theirs[2] != all[2]) {
      throw Error(ErrorCode::mismatch,
                  "ddp: rank " + std::to_string(r) + " registered " + std::to_string(theirs[0]) + " tensors of " +
                      std::to_string(theirs[1]) + " elements, rank 0 registered " + std::to_string(all[0]) + " of " +
                      std::to_string(all[1]) +
                      (theirs[0] == all[0] && theirs[1] == all[1] ? " (same totals, different shapes or dtypes)" : "") +
                      " (seen on rank " + std::to_string(comm.rank()) +
                      "): every rank must build the same model, in the same order");
    }
  }
}

}  // namespace braid::ddp
