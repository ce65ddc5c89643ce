#include "braid/ddp/bucket_plan.h"

#include <array>
#include <limits>
#include <string>

#include "braid/error.h"

namespace braid::ddp {
namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();

std::vector<size_t> checked_order(size_t n, const std::vector<size_t>& order) {
  if (order.empty()) {
    std::vector<size_t> reverse(n);
    for (size_t i = 0; i < n; ++i) reverse[i] = n - 1 - i;
    return reverse;
  }
  if (order.size() != n) {
    throw Error(ErrorCode::invalid_argument, "assign_buckets: order lists " + std::to_string(order.size()) +
                                                 " parameters, but there are " + std::to_string(n));
  }
  std::vector<bool> seen(n, false);
  for (size_t p : order) {
    if (p >= n || seen[p]) {
      throw Error(ErrorCode::invalid_argument, "assign_buckets: order is not a permutation of the parameters (index " +
                                                   std::to_string(p) + (p >= n ? " out of range)" : " repeated)"));
    }
    seen[p] = true;
  }
  return order;
}

}  // namespace

BucketPlan assign_buckets(const std::vector<ParamSpec>& params, const BucketOptions& options,
                          const std::vector<size_t>& order) {
  if (options.first_bucket_bytes == 0 || options.bucket_bytes == 0) {
    throw Error(ErrorCode::invalid_argument, "assign_buckets: bucket caps must be positive");
  }
  const std::vector<size_t> fill_order = checked_order(params.size(), order);

  BucketPlan plan;
  plan.where.resize(params.size());
  // Per dtype: the bucket being filled (kNone when none is open) and whether one has closed,
  // which decides between the first cap and the later one.
  std::array<size_t, kNumDTypes> open;
  open.fill(kNone);
  std::array<bool, kNumDTypes> closed_one{};

  for (size_t p : fill_order) {
    const DType dtype = params[p].dtype;
    const auto t = static_cast<size_t>(dtype);
    if (open[t] == kNone) {
      open[t] = plan.buckets.size();
      plan.buckets.push_back(Bucket{.dtype = dtype, .slots = {}, .count = 0});
    }
    Bucket& b = plan.buckets[open[t]];
    plan.where[p] = SlotRef{.bucket = open[t], .slot = b.slots.size()};
    b.slots.push_back(BucketSlot{.param = p, .offset = b.count, .count = params[p].count});
    b.count += params[p].count;
    const size_t cap = closed_one[t] ? options.bucket_bytes : options.first_bucket_bytes;
    if (b.bytes() >= cap) {
      open[t] = kNone;
      closed_one[t] = true;
    }
  }
  return plan;
}

}  // namespace braid::ddp
