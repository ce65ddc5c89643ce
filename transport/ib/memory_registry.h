// transport/ib/memory_registry.h - which registration a buffer uses: one of its own for the
// operation, or a range pinned through register_memory (the host cache, or the dma-buf registrar
// for CUDA memory with GPUDirect).
//
// Host buffers need nothing from the caller. An operation on memory nobody pinned registers its
// own range and deregisters it when the operation ends: a registration kept past that would
// outlive what the caller promised (the buffer lives until its operation completes). The
// caller may then give the memory back to the system and get the same addresses mapped again
// (free() trimming the heap, a vector of the next size, munmap and mmap), and a registration
// pins the pages its range had when it was made, not those the addresses name now: the NIC
// would write a message into pages the caller no longer sees, or send what they held before,
// and the operation would complete as if nothing were wrong. The cache cannot tell
// (reg_cache.h): it keeps only ranges the caller pinned, which stay mapped until
// deregister_memory. A CUDA pointer cannot be told from a host one without the CUDA API, so
// CUDA buffers are registered explicitly (register_memory with MemoryKind::cuda, allowed only
// when the GPUDirect decision chose dma-buf) and every operation inside such a range uses that
// registration. Owner thread only.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_set>

#include "transport/ib/reg_cache.h"

struct ibv_pd;

namespace braid::transport::ib {

class MemoryRegistry {
 public:
  // `dmabuf`: CUDA memory may be pinned (registered through dma-buf).
  MemoryRegistry(ibv_pd* pd, const std::string& device, bool dmabuf);

  // The registration for an operation on [base, base+bytes); release() it when the operation ends.
  Result<Mr> acquire(void* base, size_t bytes);
  void release(const Mr& mr);
  // register_memory / deregister_memory of the seam.
  Result<Mr> pin(void* base, size_t bytes, MemoryKind kind);
  void unpin(void* base, size_t bytes);

  // The host cache's counts, with each registration of one operation's own counted as a miss.
  RegCache::Stats host_stats() const;

 private:
  // The registration pinned through pin() that covers [base, base+bytes), if any.
  const Mr* pinned_covering(void* base, size_t bytes) const;

  RegCache::Registrar registrar_;    // host memory, for registrations of one operation
  std::unordered_set<void*> once_;   // handles of those, registered and not yet released
  uint64_t once_count_ = 0;          // registrations of one operation made so far
  RegCache host_;
  std::unique_ptr<RegCache> cuda_;   // only with dma-buf
  std::map<uintptr_t, Mr> pinned_;   // by base; CUDA and host ranges from pin()
};

}  // namespace braid::transport::ib
