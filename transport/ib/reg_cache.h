// transport/ib/reg_cache.h - memory registrations kept and reused, so none is on the hot path.
//
// Registering memory with an RDMA NIC pins its pages and programs the NIC's translation table:
// far too slow to do per message. The cache keeps registrations keyed by address range; an
// acquire of a range that a cached region covers is a hit and costs a map lookup. A miss
// registers the requested range joined with every cached range of the same kind it overlaps
// (the overlapped ones are dropped), so buffers that share pages end up in one region instead
// of evicting each other.
//
// Regions in use (acquired and not yet released) are never deregistered; the rest are evicted,
// least recently used first, to keep within max_bytes and max_entries before a new one is
// registered. In-use regions may take the total past the bound: a caller's buffer is always
// registered. When a registration fails and unused regions exist, they are all dropped and the
// registration is tried once more (the locked-memory limit may be what refused it).
//
// The cache cannot see free/munmap: memory released to the system and mapped again at the same
// address would hit a stale region. So it holds only ranges their owner pinned (the seam's
// register_memory), who calls invalidate() (deregister_memory) before giving memory back;
// memory_registry.h registers other memory per operation.
//
// No verbs here: registration goes through a Registrar, so tests count calls with fakes.
// Thread-safe (one mutex); the transport's owner thread is the usual caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "transport/transport.h"

namespace braid::transport::ib {

// One registered region. `handle` is the registrar's own (an ibv_mr*); the cache never reads it.
struct Mr {
  void* base = nullptr;
  size_t bytes = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  void* handle = nullptr;
  MemoryKind kind = MemoryKind::host;
};

class RegCache {
 public:
  struct Registrar {
    std::function<Result<Mr>(void* base, size_t bytes, MemoryKind kind)> reg;
    std::function<void(const Mr&)> dereg;
  };
  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;     // each miss is one registration
    uint64_t evictions = 0;  // unused regions deregistered to keep within the bounds
    uint64_t registered_bytes = 0;
    uint64_t regions = 0;    // registered now, in use or not
  };

  RegCache(Registrar registrar, size_t max_bytes, size_t max_entries);
  ~RegCache();  // deregisters every region, in use or not
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  // A region covering [base, base+bytes), pinned until release(). bytes 0 counts as 1.
  Result<Mr> acquire(void* base, size_t bytes, MemoryKind kind);
  // Ends one acquire of `mr` (as acquire returned it).
  void release(const Mr& mr);
  // Drops every region overlapping [base, base+bytes): unused ones now, those in use at their
  // last release. Later acquires register again.
  void invalidate(void* base, size_t bytes);

  Stats stats() const;

 private:
  struct Entry {
    Mr mr;
    size_t users = 0;
    std::list<uintptr_t>::iterator lru;  // position in lru_ while unused and in the index
  };

  Result<Mr> register_locked(uintptr_t lo, uintptr_t hi, MemoryKind kind);
  // Evicts unused regions, least recently used first, until `incoming_bytes` more (and one more
  // region, when not 0) fit the bounds; every unused region when `all`.
  void evict_to_fit_locked(size_t incoming_bytes, bool all = false);
  void drop_locked(std::map<uintptr_t, Entry>::iterator it);  // out of the index; dereg if unused
  void deregister_locked(const Mr& mr);

  Registrar registrar_;
  const size_t max_bytes_;
  const size_t max_entries_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Entry> index_;  // by start address; ranges never overlap
  std::list<uintptr_t> lru_;          // unused indexed regions, least recently used first
  std::vector<Entry> retired_;        // dropped from the index while in use
  Stats stats_;
};

// A registration that failed with `err`: under a low RLIMIT_MEMLOCK (ENOMEM, EPERM) the message
// names the limit with its current value, the bytes asked for and the fix (ulimit -l unlimited,
// limits.conf, systemd LimitMEMLOCK, docker --ulimit memlock=-1). The limit is read from
// getrlimit, or given (tests); RLIM_INFINITY as "unlimited".
Status registration_error(int err, size_t bytes, std::string_view device);
Status registration_error(int err, size_t bytes, std::string_view device, uint64_t memlock_limit);

}  // namespace braid::transport::ib
