// RunCache's key: operations that differ in anything their schedule depends on get different
// shapes, and operations that differ only in what a kept run takes anew (buffers, tag) the same.
// The key is compared as 24 bytes, so every field must take part and no padding may.
#include "runtime/engine/run_cache.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

namespace braid {
namespace {

using collectives::Algo;
using collectives::CollectiveArgs;
using collectives::Kind;

TEST(RunShape, OperationsDifferingInWhatTheirScheduleReadsHaveDifferentShapes) {
  float a[8] = {}, b[8] = {}, c[8] = {}, d[8] = {};
  CollectiveArgs base;
  base.kind = Kind::all_reduce, base.send = a, base.recv = b, base.count = 8, base.dtype = DType::f32;
  base.op = Op::sum, base.root = 0;
  const std::optional<RunShape> shape = RunCache::shape_of(base, /*staged=*/false, Algo::automatic);
  ASSERT_TRUE(shape.has_value());

  // The same shape: other buffers in the same pattern, a collective's peer or tag.
  CollectiveArgs same = base;
  same.send = c, same.recv = d, same.peer = 3, same.tag = 9;
  EXPECT_TRUE(*RunCache::shape_of(same, false, Algo::automatic) == *shape);

  const std::vector<std::function<void(CollectiveArgs&)>> changes = {
      [](CollectiveArgs& x) { x.kind = Kind::broadcast; },
      [](CollectiveArgs& x) { x.count = 7; },
      [](CollectiveArgs& x) { x.dtype = DType::i32; },
      [](CollectiveArgs& x) { x.op = Op::max; },
      [](CollectiveArgs& x) { x.root = 1; },
      [&](CollectiveArgs& x) { x.recv = const_cast<void*>(x.send); },  // in place
      [](CollectiveArgs& x) { x.send = nullptr; },
      [](CollectiveArgs& x) { x.recv = nullptr; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    CollectiveArgs other = base;
    changes[i](other);
    const std::optional<RunShape> s = RunCache::shape_of(other, false, Algo::automatic);
    ASSERT_TRUE(s.has_value()) << "change " << i;
    EXPECT_FALSE(*s == *shape) << "change " << i;
  }
  EXPECT_FALSE(*RunCache::shape_of(base, false, Algo::ring) == *shape) << "the algorithm preference";

  // A send or receive is kept per peer and kind, whatever its tag.
  CollectiveArgs send = base;
  send.kind = Kind::send, send.recv = nullptr, send.peer = 1, send.tag = 5;
  CollectiveArgs send_again = send;
  send_again.tag = 6;
  EXPECT_TRUE(*RunCache::shape_of(send_again, false, Algo::automatic) == *RunCache::shape_of(send, false, Algo::automatic));
  CollectiveArgs send_elsewhere = send;
  send_elsewhere.peer = 2;
  EXPECT_FALSE(*RunCache::shape_of(send_elsewhere, false, Algo::automatic) ==
               *RunCache::shape_of(send, false, Algo::automatic));
  CollectiveArgs recv = send;
  recv.kind = Kind::recv, recv.send = nullptr, recv.recv = b;
  EXPECT_FALSE(*RunCache::shape_of(recv, false, Algo::automatic) == *RunCache::shape_of(send, false, Algo::automatic));

  // Not kept: uneven counts, staged GPU buffers, more than RunCache::kMaxBytes.
  CollectiveArgs uneven = base;
  uneven.counts = {4, 4};
  EXPECT_FALSE(RunCache::shape_of(uneven, false, Algo::automatic).has_value());
  EXPECT_FALSE(RunCache::shape_of(base, /*staged=*/true, Algo::automatic).has_value());
  CollectiveArgs large = base;
  large.count = RunCache::kMaxBytes / sizeof(float) + 1;
  EXPECT_FALSE(RunCache::shape_of(large, false, Algo::automatic).has_value());
}

}  // namespace
}  // namespace braid
