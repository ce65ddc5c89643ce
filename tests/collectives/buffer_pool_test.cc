#include "collectives/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace braid::collectives {
namespace {

TEST(BufferPool, ReturnedBuffersAreReusedBestFit) {
  // Hold whatever earlier tests left in the cache, so that it starts empty.
  std::vector<PooledBytes> earlier;
  while (pooled_buffers() > 0) earlier.push_back(take_bytes(1));
  std::byte* small_mem;
  std::byte* large_mem;
  {
    PooledBytes small = take_bytes(5000);
    PooledBytes large = take_bytes(100000);
    ASSERT_NE(small.get(), nullptr);
    std::memset(small.get(), 1, 5000);  // really that large (ASan would object otherwise)
    std::memset(large.get(), 2, 100000);
    small_mem = small.get();
    large_mem = large.get();
  }
  // The smallest cached buffer that fits: the 5000-byte request gets the small one back even
  // though the large one fits too, and the next gets the large one.
  PooledBytes a = take_bytes(4000);
  PooledBytes b = take_bytes(4000);
  EXPECT_EQ(a.get(), small_mem);
  EXPECT_EQ(b.get(), large_mem);
}

TEST(BufferPool, ZeroBytesIsNull) { EXPECT_EQ(take_bytes(0).get(), nullptr); }

TEST(BufferPool, TheCacheIsBounded) {
  {
    std::vector<PooledBytes> many;
    for (int i = 0; i < 100; ++i) many.push_back(take_bytes(size_t{1} << 20));
  }
  EXPECT_LE(pooled_buffers(), 32u);
  EXPECT_LE(pooled_bytes(), size_t{128} << 20);
  {
    PooledBytes huge = take_bytes(size_t{200} << 20);  // larger than the whole cache may hold
    std::memset(huge.get(), 0, 16);
  }
  EXPECT_LE(pooled_bytes(), size_t{128} << 20);
}

}  // namespace
}  // namespace braid::collectives
