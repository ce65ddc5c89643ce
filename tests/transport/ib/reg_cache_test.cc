// RegCache with a fake registrar that counts registrations and knows which regions are live.
// Addresses are numbers here: the cache never touches the memory, only the registrar would.
#include "transport/ib/reg_cache.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace braid::transport::ib {
namespace {

const uintptr_t kPage = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
constexpr uintptr_t kBase = uintptr_t{1} << 40;

void* at(uintptr_t page, uintptr_t offset = 0) { return reinterpret_cast<void*>(kBase + page * kPage + offset); }

struct FakeNic {
  int regs = 0;
  int deregs = 0;
  uint32_t next_key = 1;
  std::map<void*, Mr> live;          // by handle
  size_t pinned_limit = SIZE_MAX;    // like RLIMIT_MEMLOCK: refuses past it with ENOMEM
  uintptr_t unmapped = 0;            // an address no registration may cover (0: none)

  size_t pinned() const {
    size_t n = 0;
    for (const auto& [h, mr] : live) n += mr.bytes;
    return n;
  }

  RegCache::Registrar registrar() {
    return {[this](void* base, size_t bytes, MemoryKind kind) -> Result<Mr> {
              ++regs;
              const uintptr_t lo = reinterpret_cast<uintptr_t>(base);
              if (unmapped != 0 && unmapped >= lo && unmapped < lo + bytes) return registration_error(EFAULT, bytes, "fake0");
              if (pinned() + bytes > pinned_limit) return registration_error(ENOMEM, bytes, "fake0", pinned_limit);
              const uint32_t key = next_key++;
              Mr mr{base, bytes, key, key + 1000, reinterpret_cast<void*>(uintptr_t{key}), kind};
              live[mr.handle] = mr;
              return mr;
            },
            [this](const Mr& mr) {
              ++deregs;
              EXPECT_EQ(live.erase(mr.handle), 1u) << "deregistered twice or never registered";
            }};
  }
};

Mr acquire_ok(RegCache& cache, void* base, size_t bytes, MemoryKind kind = MemoryKind::host) {
  auto r = cache.acquire(base, bytes, kind);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r.value() : Mr{};
}

TEST(RegCache, MissRegistersWholePagesThenCoveredRangesHit) {
  FakeNic nic;
  RegCache cache(nic.registrar(), SIZE_MAX, 1000);
  Mr a = acquire_ok(cache, at(0, 100), 1000);
  EXPECT_EQ(a.base, at(0));
  EXPECT_EQ(a.bytes, kPage);
  cache.release(a);
  Mr b = acquire_ok(cache, at(0, 2000), 100);  // another buffer in the same page
  EXPECT_EQ(b.lkey, a.lkey);
  cache.release(b);
  EXPECT_EQ(nic.regs, 1);
  auto s = cache.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.registered_bytes, kPage);
  EXPECT_EQ(s.regions, 1u);
}

TEST(RegCache, NoRegistrationPerOperationInSteadyState) {
  FakeNic nic;
  RegCache cache(nic.registrar(), SIZE_MAX, 1000);
  for (int op = 0; op < 1000; ++op) {
    for (uintptr_t buffer = 0; buffer < 3; ++buffer) {
      Mr mr = acquire_ok(cache, at(buffer * 16), 8 * kPage);
      cache.release(mr);
    }
  }
  EXPECT_EQ(nic.regs, 3) << "one registration per buffer, then hits";
  EXPECT_EQ(nic.deregs, 0);
  EXPECT_EQ(cache.stats().hits, 2997u);
}

TEST(RegCache, OverlappingRangesAreJoinedIntoOneRegion) {
  FakeNic nic;
  RegCache cache(nic.registrar(), SIZE_MAX, 1000);
  cache.release(acquire_ok(cache, at(0), 2 * kPage));
  Mr joined = acquire_ok(cache, at(1), 2 * kPage);  // pages 1..2: overlaps page 1
  EXPECT_EQ(joined.base, at(0));
  EXPECT_EQ(joined.bytes, 3 * kPage);
  EXPECT_EQ(nic.deregs, 1) << "the region it absorbed";
  cache.release(joined);
  cache.release(acquire_ok(cache, at(0), 3 * kPage));
  cache.release(acquire_ok(cache, at(1), kPage));
  EXPECT_EQ(nic.regs, 2);
  EXPECT_EQ(cache.stats().regions, 1u);
}

TEST(RegCache, JoinSpanningUnmappedMemoryFallsBackToTheRequest) {
  FakeNic nic;
  RegCache cache(nic.registrar(), SIZE_MAX, 1000);
  cache.release(acquire_ok(cache, at(0), 2 * kPage));
  nic.unmapped = reinterpret_cast<uintptr_t>(at(0, 8));  // page 0 went back to the system
  Mr mr = acquire_ok(cache, at(1, 16), 2 * kPage);
  EXPECT_EQ(mr.base, at(1));
  EXPECT_EQ(mr.bytes, 3 * kPage);
  EXPECT_EQ(nic.regs, 3) << "the joined try, then the request alone";
  cache.release(mr);
}

TEST(RegCache, EvictsLeastRecentlyUsedToStayWithinBytes) {
  FakeNic nic;
  RegCache cache(nic.registrar(), 3 * kPage, 1000);
  for (uintptr_t p : {0, 2, 4}) cache.release(acquire_ok(cache, at(p), kPage));
  cache.release(acquire_ok(cache, at(0), kPage));  // page 0 used again: page 2 is now the oldest
  cache.release(acquire_ok(cache, at(6), kPage));
  auto s = cache.stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.registered_bytes, 3 * kPage);
  EXPECT_EQ(nic.pinned(), 3 * kPage);
  const int regs = nic.regs;
  cache.release(acquire_ok(cache, at(0), kPage));
  EXPECT_EQ(nic.regs, regs) << "page 0 stayed";
  cache.release(acquire_ok(cache, at(2), kPage));
  EXPECT_EQ(nic.regs, regs + 1) << "page 2 was the one evicted";
}

TEST(RegCache, EvictsToStayWithinEntries) {
  FakeNic nic;
  RegCache cache(nic.registrar(), SIZE_MAX, 2);
  for (uintptr_t p : {0, 2, 4, 6}) cache.release(acquire_ok(cache, at(p), kPage));
  EXPECT_EQ(cache.stats().regions, 2u);
  EXPECT_EQ(cache.stats().evictions, 2u);
  EXPECT_EQ(nic.live.size(), 2u);
}

TEST(RegCache, RegionsInUseAreNeverEvicted) {
  FakeNic nic;
  RegCache cache(nic.registrar(), 2 * kPage, 1000);
  Mr a = acquire_ok(cache, at(0), kPage);
  Mr b = acquire_ok(cache, at(2), kPage);
  Mr c = acquire_ok(cache, at(4), kPage);  // past the bound: a and b are pinned
  EXPECT_EQ(cache.stats().evictions, 0u);
  EXPECT_EQ(nic.live.size(), 3u);
  EXPECT_EQ(cache.stats().registered_bytes, 3 * kPage);
  cache.release(a);  // now unused: evicted to return within the bound
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().registered_bytes, 2 * kPage);
  EXPECT_EQ(nic.live.count(a.handle), 0u);
  EXPECT_EQ(nic.live.count(b.handle), 1u);
  cache.release(b);
  cache.release(c);
}

TEST(RegCache, NestedAcquiresPinUntilTheLastRelease) {
  FakeNic nic;
  RegCache cache(nic.registrar(), kPage, 1000);
  Mr a1 = acquire_ok(cache, at(0), kPage);
  Mr a2 = acquire_ok(cache, at(0), 16);
  cache.release(a1);
  cache.release(acquire_ok(cache, at(2), kPage));  // needs room: a is still held once
  EXPECT_EQ(nic.live.count(a2.handle), 1u);
  cache.release(a2);
}

TEST(RegCache, InvalidateDropsUnusedRegionsNow) {
  FakeNic nic;
  RegCache cache(nic.registrar(), SIZE_MAX, 1000);
  cache.release(acquire_ok(cache, at(0), 2 * kPage));
  cache.release(acquire_ok(cache, at(4), kPage));
  cache.invalidate(at(1, 5), 1);  // any byte of the first region
  EXPECT_EQ(nic.deregs, 1);
  EXPECT_EQ(cache.stats().regions, 1u);
  cache.release(acquire_ok(cache, at(0), kPage));
  EXPECT_EQ(nic.regs, 3) << "registered again after the invalidation";
  cache.release(acquire_ok(cache, at(4), kPage));
  EXPECT_EQ(nic.regs, 3) << "the other region was kept";
}

TEST(RegCache, InvalidateOfARegionInUseDeregistersItAtItsLastRelease) {
  FakeNic nic;
  RegCache cache(nic.registrar(), SIZE_MAX, 1000);
  Mr old_one = acquire_ok(cache, at(0), kPage);
  cache.invalidate(at(0), kPage);
  EXPECT_EQ(nic.deregs, 0) << "still in use";
  Mr fresh = acquire_ok(cache, at(0), kPage);
  EXPECT_NE(fresh.handle, old_one.handle) << "a new registration, not the invalidated one";
  cache.release(old_one);
  EXPECT_EQ(nic.deregs, 1);
  EXPECT_EQ(nic.live.count(old_one.handle), 0u);
  cache.release(fresh);
  EXPECT_EQ(nic.live.count(fresh.handle), 1u) << "the fresh one stays cached";
  EXPECT_EQ(cache.stats().regions, 1u);
}

TEST(RegCache, RefusedRegistrationIsRetriedAfterDroppingUnusedRegions) {
  FakeNic nic;
  nic.pinned_limit = 2 * kPage;
  RegCache cache(nic.registrar(), SIZE_MAX, 1000);
  cache.release(acquire_ok(cache, at(0), kPage));
  cache.release(acquire_ok(cache, at(2), kPage));
  Mr c = acquire_ok(cache, at(4), 2 * kPage);  // refused once: the two cached pages hold the limit
  EXPECT_EQ(nic.regs, 4);
  EXPECT_EQ(cache.stats().evictions, 2u);
  cache.release(c);
}

TEST(RegCache, RefusalWithNothingToDropIsTheRegistrarsError) {
  FakeNic nic;
  nic.pinned_limit = kPage;
  RegCache cache(nic.registrar(), SIZE_MAX, 1000);
  Mr held = acquire_ok(cache, at(0), kPage);
  auto r = cache.acquire(at(2), kPage, MemoryKind::host);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("RLIMIT_MEMLOCK"), std::string::npos) << r.status().message();
  EXPECT_EQ(cache.stats().regions, 1u);
  cache.release(held);
}

TEST(RegCache, KindsAreCachedApart) {
  FakeNic nic;
  RegCache cache(nic.registrar(), SIZE_MAX, 1000);
  cache.release(acquire_ok(cache, at(0), kPage, MemoryKind::host));
  Mr cuda = acquire_ok(cache, at(0), kPage, MemoryKind::cuda);
  EXPECT_EQ(cuda.kind, MemoryKind::cuda);
  EXPECT_EQ(nic.regs, 2);
  cache.release(cuda);
}

TEST(RegCache, ZeroBytesStillGetARegion) {
  FakeNic nic;
  RegCache cache(nic.registrar(), SIZE_MAX, 1000);
  Mr mr = acquire_ok(cache, at(3, 7), 0);
  EXPECT_EQ(mr.bytes, kPage);
  cache.release(mr);
}

TEST(RegCache, DestructionDeregistersEverything) {
  FakeNic nic;
  {
    RegCache cache(nic.registrar(), SIZE_MAX, 1000);
    cache.release(acquire_ok(cache, at(0), kPage));
    Mr held = acquire_ok(cache, at(2), kPage);
    (void)held;
    Mr retired = acquire_ok(cache, at(4), kPage);
    cache.invalidate(at(4), 1);
    (void)retired;
  }
  EXPECT_TRUE(nic.live.empty());
  EXPECT_EQ(nic.regs, nic.deregs);
}

// The cache is shared by threads (the owner and callers of register_memory): its books must
// balance after they race on overlapping ranges, with evictions and invalidations mixed in.
TEST(RegCache, ThreadsSharingTheCacheKeepItsBooksBalanced) {
  FakeNic nic;
  std::mutex nic_mu;  // the fake itself is not thread-safe; the cache calls it under its own lock
  RegCache::Registrar inner = nic.registrar();
  RegCache::Registrar guarded{[&](void* b, size_t n, MemoryKind k) { std::lock_guard l(nic_mu); return inner.reg(b, n, k); },
                              [&](const Mr& mr) { std::lock_guard l(nic_mu); inner.dereg(mr); }};
  {
    RegCache cache(guarded, 8 * kPage, 6);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&cache, t] {
        for (int i = 0; i < 2000; ++i) {
          const uintptr_t page = static_cast<uintptr_t>((i * 7 + t * 3) % 16);
          auto mr = cache.acquire(at(page, 64), kPage + static_cast<size_t>(i % 3) * kPage, MemoryKind::host);
          ASSERT_TRUE(mr.is_ok()) << mr.status().message();
          ASSERT_LE(mr->base, at(page, 64));
          if (i % 97 == 0) cache.invalidate(at(page), 1);
          cache.release(mr.value());
        }
      });
    }
    for (std::thread& th : threads) th.join();
    auto s = cache.stats();
    EXPECT_EQ(s.regions, nic.live.size());
    EXPECT_EQ(s.registered_bytes, nic.pinned());
    EXPECT_LE(s.registered_bytes, 8 * kPage) << "nothing is in use now: back within the bound";
    EXPECT_EQ(s.hits + s.misses, 8000u);
  }
  EXPECT_TRUE(nic.live.empty());
  EXPECT_EQ(nic.regs, nic.deregs);
}

TEST(RegistrationError, LowMemlockNamesTheLimitTheBytesAndTheFix) {
  for (int err : {ENOMEM, EPERM}) {
    Status s = registration_error(err, size_t{4} << 20, "rxe0", 64 * 1024);
    EXPECT_EQ(s.code(), ErrorCode::system);
    const std::string& m = s.message();
    EXPECT_EQ(m.rfind("ib: registering 4194304 bytes of memory with rxe0 failed: ", 0), 0u) << m;
    for (const char* piece : {"RLIMIT_MEMLOCK", "`ulimit -l`) is 64 KiB", "ulimit -l unlimited", "limits.conf",
                              "LimitMEMLOCK=infinity", "--ulimit memlock=-1"}) {
      EXPECT_NE(m.find(piece), std::string::npos) << piece << " in " << m;
    }
  }
}

TEST(RegistrationError, UnlimitedMemlockIsNotBlamed) {
  const std::string m = registration_error(ENOMEM, 4096, "mlx5_0", RLIM_INFINITY).message();
  EXPECT_EQ(m.find("ulimit -l unlimited"), std::string::npos) << m;
  EXPECT_NE(m.find("locked-memory limit is unlimited"), std::string::npos) << m;
}

TEST(RegistrationError, OtherErrorsAreReportedAsTheyAre) {
  const std::string m = registration_error(EFAULT, 4096, "mlx5_0", 64 * 1024).message();
  EXPECT_NE(m.find("Bad address"), std::string::npos) << m;
  EXPECT_EQ(m.find("RLIMIT_MEMLOCK"), std::string::npos) << m;
}

TEST(RegistrationError, ReadsTheProcessLimit) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &saved), 0);
  if (saved.rlim_cur != RLIM_INFINITY && saved.rlim_cur < 128 * 1024) GTEST_SKIP() << "memlock is already below 128 KiB";
  rlimit low = saved;
  low.rlim_cur = 128 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &low), 0);
  const std::string m = registration_error(ENOMEM, 1 << 20, "rxe0").message();
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &saved), 0);
  EXPECT_NE(m.find("is 128 KiB"), std::string::npos) << m;
}

}  // namespace
}  // namespace braid::transport::ib
