#include "transport/ib/reg_cache.h"

namespace braid::transport::ib {

RegCache::RegCache(Registrar registrar, size_t max_bytes, size_t max_entries)
    : registrar_(std::move(registrar)), max_bytes_(max_bytes), max_entries_(max_entries) {}
RegCache::~RegCache() = default;
Result<Mr> RegCache::acquire(void*, size_t, MemoryKind) { return internal_error("RegCache: not implemented yet"); }
void RegCache::release(const Mr&) {}
void RegCache::invalidate(void*, size_t) {}
RegCache::Stats RegCache::stats() const { return stats_; }

Status registration_error(int err, size_t, std::string_view) { return system_error("ib registration", err); }
Status registration_error(int err, size_t, std::string_view, uint64_t) { return system_error("ib registration", err); }

}  // namespace braid::transport::ib
