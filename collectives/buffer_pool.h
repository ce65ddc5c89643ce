// collectives/buffer_pool.h - reused memory for executors' scratch, landing slots and headers.
//
// Every operation needs a few buffers of its own (landing slots for reductions, the 64 KiB
// header landing area per peer, scratch). Allocating them per operation costs more than a small
// operation itself: glibc returns freed memory at the top of the heap to the kernel, so the
// next operation page-faults it back in, and which sizes hit that depends on what ran before
// (docs/code_figures.md, "Collectives"). A small
// process-wide cache keeps the last buffers instead. Thread-safe.
#pragma once

#include <cstddef>
#include <memory>

namespace braid::collectives {

struct PooledBytesReturn {
  size_t capacity = 0;
  void operator()(std::byte* p) const;  // back to the cache, or freed when it is full
};
using PooledBytes = std::unique_ptr<std::byte[], PooledBytesReturn>;

// At least `bytes` bytes (not zeroed); the smallest cached buffer that fits, or a new one.
PooledBytes take_bytes(size_t bytes);

// For tests: buffers and bytes the cache holds now.
size_t pooled_buffers();
size_t pooled_bytes();

}  // namespace braid::collectives
