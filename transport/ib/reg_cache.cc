#include "transport/ib/reg_cache.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

namespace braid::transport::ib {
namespace {

// Regions cover whole pages: the NIC pins pages anyway, and two buffers sharing a page then
// overlap and are joined into one region instead of pinning that page twice.
uintptr_t page_size() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

RegCache::RegCache(Registrar registrar, size_t max_bytes, size_t max_entries)
    : registrar_(std::move(registrar)), max_bytes_(max_bytes), max_entries_(std::max<size_t>(max_entries, 1)) {}

RegCache::~RegCache() {
  std::lock_guard lock(mu_);
  for (auto& [start, entry] : index_) deregister_locked(entry.mr);
  for (Entry& entry : retired_) deregister_locked(entry.mr);
}

Result<Mr> RegCache::acquire(void* base, size_t bytes, MemoryKind kind) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base);
  const uintptr_t hi = lo + std::max<size_t>(bytes, 1);
  std::lock_guard lock(mu_);
  auto it = index_.upper_bound(lo);
  if (it != index_.begin()) {
    Entry& e = std::prev(it)->second;
    const uintptr_t start = std::prev(it)->first;
    if (e.mr.kind == kind && hi <= start + e.mr.bytes) {
      if (e.users++ == 0) lru_.erase(e.lru);
      ++stats_.hits;
      return e.mr;
    }
  }
  ++stats_.misses;
  return register_locked(lo, hi, kind);
}

Result<Mr> RegCache::register_locked(uintptr_t lo, uintptr_t hi, MemoryKind kind) {
  lo &= ~(page_size() - 1);
  hi = (hi + page_size() - 1) & ~(page_size() - 1);
  // Regions this one overlaps leave the index (which never holds overlapping ranges); those of
  // the same kind are joined into the new one.
  uintptr_t join_lo = lo, join_hi = hi;
  auto it = index_.upper_bound(lo);
  if (it != index_.begin() && std::prev(it)->first + std::prev(it)->second.mr.bytes > lo) --it;
  while (it != index_.end() && it->first < hi) {
    if (it->second.mr.kind == kind) {
      join_lo = std::min(join_lo, it->first);
      join_hi = std::max<uintptr_t>(join_hi, it->first + it->second.mr.bytes);
    }
    drop_locked(it++);
  }
  evict_to_fit_locked(join_hi - join_lo);
  auto reg = [&](uintptr_t a, uintptr_t b) { return registrar_.reg(reinterpret_cast<void*>(a), b - a, kind); };
  Result<Mr> r = reg(join_lo, join_hi);
  // A joined range may span memory that was unmapped since its part was registered.
  if (!r.is_ok() && (join_lo != lo || join_hi != hi)) r = reg(lo, hi);
  // The locked-memory limit may be what refused it: unused regions give their pages back.
  if (!r.is_ok() && !lru_.empty()) {
    evict_to_fit_locked(join_hi - join_lo, /*all=*/true);
    r = reg(lo, hi);
  }
  if (!r.is_ok()) return r.status();
  Mr mr = r.value();
  mr.kind = kind;
  Entry& e = index_[reinterpret_cast<uintptr_t>(mr.base)];
  e.mr = mr;
  e.users = 1;
  stats_.registered_bytes += mr.bytes;
  ++stats_.regions;
  return mr;
}

void RegCache::release(const Mr& mr) {
  std::lock_guard lock(mu_);
  auto it = index_.find(reinterpret_cast<uintptr_t>(mr.base));
  if (it != index_.end() && it->second.mr.handle == mr.handle) {
    Entry& e = it->second;
    if (e.users > 0 && --e.users == 0) {
      e.lru = lru_.insert(lru_.end(), it->first);
      evict_to_fit_locked(0);  // in-use regions may have taken the cache past its bounds
    }
    return;
  }
  for (auto r = retired_.begin(); r != retired_.end(); ++r) {
    if (r->mr.handle == mr.handle && r->mr.base == mr.base) {
      if (--r->users == 0) {
        deregister_locked(r->mr);
        retired_.erase(r);
      }
      return;
    }
  }
}

void RegCache::invalidate(void* base, size_t bytes) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base);
  const uintptr_t hi = lo + std::max<size_t>(bytes, 1);
  std::lock_guard lock(mu_);
  auto it = index_.upper_bound(lo);
  if (it != index_.begin() && std::prev(it)->first + std::prev(it)->second.mr.bytes > lo) --it;
  while (it != index_.end() && it->first < hi) drop_locked(it++);
}

RegCache::Stats RegCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void RegCache::evict_to_fit_locked(size_t incoming_bytes, bool all) {
  const size_t incoming_regions = incoming_bytes > 0 ? 1 : 0;
  while (!lru_.empty() && (all || stats_.registered_bytes + incoming_bytes > max_bytes_ ||
                           stats_.regions + incoming_regions > max_entries_)) {
    auto it = index_.find(lru_.front());
    lru_.pop_front();
    deregister_locked(it->second.mr);
    index_.erase(it);
    ++stats_.evictions;
  }
}

void RegCache::drop_locked(std::map<uintptr_t, Entry>::iterator it) {
  Entry& e = it->second;
  if (e.users == 0) {
    lru_.erase(e.lru);
    deregister_locked(e.mr);
  } else {
    retired_.push_back(std::move(e));
  }
  index_.erase(it);
}

void RegCache::deregister_locked(const Mr& mr) {
  if (registrar_.dereg) registrar_.dereg(mr);
  stats_.registered_bytes -= mr.bytes;
  --stats_.regions;
}

namespace {

std::string size_text(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t u = 0;
  while (u + 1 < std::size(units) && bytes != 0 && bytes % (uint64_t{1} << (10 * (u + 1))) == 0) ++u;
  return std::to_string(bytes >> (10 * u)) + " " + units[u];
}

}  // namespace

Status registration_error(int err, size_t bytes, std::string_view device, uint64_t memlock_limit) {
  std::string msg = "ib: registering " + std::to_string(bytes) + " bytes of memory with " + std::string(device) +
                    " failed: " + std::strerror(err);
  if ((err == ENOMEM || err == EPERM) && memlock_limit != RLIM_INFINITY) {
    msg += "; the locked-memory limit (RLIMIT_MEMLOCK, `ulimit -l`) is " + size_text(memlock_limit) +
           ", and RDMA pins every page it registers. Raise it for the job: `ulimit -l unlimited` in the shell that "
           "starts it, `* - memlock unlimited` in /etc/security/limits.conf, LimitMEMLOCK=infinity in a systemd "
           "unit, `docker run --ulimit memlock=-1` in a container";
    return Status(ErrorCode::system, msg);
  }
  if (err == ENOMEM) {
    msg += " (the locked-memory limit is unlimited, so the NIC or the kernel ran out of room for registrations: "
           "lower the memory the job registers at once, e.g. BRAID_CHUNK_BYTES)";
  }
  return Status(ErrorCode::system, msg);
}

Status registration_error(int err, size_t bytes, std::string_view device) {
  rlimit limit{};
  const uint64_t current = getrlimit(RLIMIT_MEMLOCK, &limit) == 0 ? limit.rlim_cur : RLIM_INFINITY;
  return registration_error(err, bytes, device, current);
}

}  // namespace braid::transport::ib
