#include "collectives/buffer_pool.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace braid::collectives {
namespace {

// Enough for the buffers of a few operations in flight; the byte cap keeps one huge
// operation's scratch from staying around forever.
constexpr size_t kMaxBuffers = 32;
constexpr size_t kMaxBytes = size_t{128} << 20;

struct Cache {
  std::mutex mu;
  std::vector<std::pair<size_t, std::byte*>> free;  // (capacity, memory)
  size_t bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: buffers may come back during exit
  return *c;
}

size_t round_up(size_t bytes) {
  size_t cap = 4096;
  while (cap < bytes && cap < (size_t{1} << 62)) cap <<= 1;
  return cap;
}

}  // namespace

PooledBytes take_bytes(size_t bytes) {
  if (bytes == 0) return PooledBytes(nullptr, PooledBytesReturn{0});
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto best = c.free.end();
    for (auto it = c.free.begin(); it != c.free.end(); ++it) {
      if (it->first >= bytes && (best == c.free.end() || it->first < best->first)) best = it;
    }
    if (best != c.free.end()) {
      auto [cap, p] = *best;
      c.free.erase(best);
      c.bytes -= cap;
      return PooledBytes(p, PooledBytesReturn{cap});
    }
  }
  const size_t cap = round_up(bytes);
  return PooledBytes(new std::byte[cap], PooledBytesReturn{cap});
}

void PooledBytesReturn::operator()(std::byte* p) const {
  if (p == nullptr) return;
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.free.size() < kMaxBuffers && c.bytes + capacity <= kMaxBytes) {
      c.free.emplace_back(capacity, p);
      c.bytes += capacity;
      return;
    }
  }
  delete[] p;
}

size_t pooled_buffers() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return cache().free.size();
}

size_t pooled_bytes() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return cache().bytes;
}

}  // namespace braid::collectives
