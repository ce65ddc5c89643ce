#include "transport/ib/memory_registry.h"

#include "transport/ib/reg_cache_verbs.h"

#include <algorithm>

namespace braid::transport::ib {

namespace {

// The host cache's bounds: regions beyond these are evicted when unused. The locked-memory
// limit may refuse less; the cache then drops unused regions and tries again.
constexpr size_t kCacheMaxBytes = size_t{8} << 30;
constexpr size_t kCacheMaxEntries = 4096;
constexpr size_t kCudaMaxEntries = 1024;

}  // namespace

MemoryRegistry::MemoryRegistry(ibv_pd* pd, const std::string& device, bool dmabuf)
    : registrar_(verbs_registrar(pd, device, false)),
      host_(verbs_registrar(pd, device, false), kCacheMaxBytes, kCacheMaxEntries) {
  if (dmabuf) cuda_ = std::make_unique<RegCache>(verbs_registrar(pd, device, true), ~size_t{0}, kCudaMaxEntries);
}

const Mr* MemoryRegistry::pinned_covering(void* base, size_t bytes) const {
  if (pinned_.empty()) return nullptr;
  const auto at = reinterpret_cast<uintptr_t>(base);
  auto it = pinned_.upper_bound(at);
  if (it == pinned_.begin()) return nullptr;
  --it;
  const Mr& mr = it->second;
  const auto region = reinterpret_cast<uintptr_t>(mr.base);
  return at >= region && at + bytes <= region + mr.bytes ? &mr : nullptr;
}

Result<Mr> MemoryRegistry::acquire(void* base, size_t bytes) {
  if (const Mr* pinned = pinned_covering(base, bytes)) {
    if (pinned->kind == MemoryKind::cuda) return *pinned;
    return host_.acquire(base, bytes, MemoryKind::host);  // the pinned region: a hit
  }
  ASSIGN_OR_RETURN(Mr mr, registrar_.reg(base, std::max<size_t>(bytes, 1), MemoryKind::host));
  once_.insert(mr.handle);
  ++once_count_;
  return mr;
}

void MemoryRegistry::release(const Mr& mr) {
  if (once_.erase(mr.handle) != 0) return registrar_.dereg(mr);
  if (mr.kind == MemoryKind::host) host_.release(mr);  // a pinned CUDA range stays until unpin
}

RegCache::Stats MemoryRegistry::host_stats() const {
  RegCache::Stats s = host_.stats();
  s.misses += once_count_;
  return s;
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
