// transport/ib/memory_registry.h - which registration a buffer uses: the host cache, or a CUDA
// range pinned through register_memory with the dma-buf registrar (GPUDirect).
//
// Host buffers need nothing from the caller: the cache registers each once (reg_cache.h). A
// CUDA pointer cannot be told from a host one without the CUDA API, so CUDA buffers are
// registered explicitly (register_memory with MemoryKind::cuda, allowed only when the GPUDirect
// decision chose dma-buf) and every operation inside such a range uses that registration.
// Owner thread only.
#pragma once

#include <map>
#include <memory>
#include <string>

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

  RegCache::Stats host_stats() const { return host_.stats(); }

 private:
  RegCache host_;
  std::unique_ptr<RegCache> cuda_;   // only with dma-buf
  std::map<uintptr_t, Mr> pinned_;   // by base; CUDA and host ranges from pin()
};

}  // namespace braid::transport::ib
