#include "transport/ib/memory_registry.h"

#include "transport/ib/reg_cache_verbs.h"

namespace braid::transport::ib {

namespace {

// The host cache's bounds: regions beyond these are evicted when unused. The locked-memory
// limit may refuse less; the cache then drops unused regions and tries again.
constexpr size_t kCacheMaxBytes = size_t{8} << 30;
constexpr size_t kCacheMaxEntries = 4096;
constexpr size_t kCudaMaxEntries = 1024;

}  // namespace

MemoryRegistry::MemoryRegistry(ibv_pd* pd, const std::string& device, bool dmabuf)
    : host_(verbs_registrar(pd, device, false), kCacheMaxBytes, kCacheMaxEntries) {
  if (dmabuf) cuda_ = std::make_unique<RegCache>(verbs_registrar(pd, device, true), ~size_t{0}, kCudaMaxEntries);
}

Result<Mr> MemoryRegistry::acquire(void* base, size_t bytes) {
  if (!pinned_.empty()) {
    const auto at = reinterpret_cast<uintptr_t>(base);
    auto it = pinned_.upper_bound(at);
    if (it != pinned_.begin()) {
      --it;
      const Mr& mr = it->second;
      if (mr.kind == MemoryKind::cuda && at + bytes <= it->first + mr.bytes) return mr;
    }
  }
  return host_.acquire(base, bytes, MemoryKind::host);
}

void MemoryRegistry::release(const Mr& mr) {
  if (mr.kind == MemoryKind::host) host_.release(mr);  // a pinned CUDA range stays until unpin
}

Result<Mr> MemoryRegistry::pin(void* base, size_t bytes, MemoryKind kind) {
  RegCache* cache = kind == MemoryKind::cuda ? cuda_.get() : &host_;
  if (cache == nullptr) {
    return invalid_argument("ib: CUDA memory can be registered only with GPUDirect (dma-buf), which is off here");
  }
  ASSIGN_OR_RETURN(Mr mr, cache->acquire(base, bytes, kind));
  pinned_[reinterpret_cast<uintptr_t>(base)] = mr;
  return mr;
}

void MemoryRegistry::unpin(void* base, size_t bytes) {
  auto it = pinned_.find(reinterpret_cast<uintptr_t>(base));
  MemoryKind kind = MemoryKind::host;
  if (it != pinned_.end()) {
    kind = it->second.kind;
    (kind == MemoryKind::cuda ? *cuda_ : host_).release(it->second);
    pinned_.erase(it);
  }
  host_.invalidate(base, bytes);
  if (cuda_) cuda_->invalidate(base, bytes);
}

}  // namespace braid::transport::ib
