#include "transport/shm/page_collapse.h"

#include <sys/mman.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // <asm-generic/mman-common.h> of Linux 6.1; older headers lack it
#endif

namespace braid::transport::shm {

bool PageCollapse::mostly_huge(const void* data, size_t bytes) const {
  return bytes > 0 && 2 * pages_.small_bytes(data, bytes) <= bytes;
}

bool PageCollapse::make_huge(const void* data, size_t bytes) {
  if (mostly_huge(data, bytes)) return true;
  if (!pages_.available()) return false;  // the answer afterwards could not be trusted
  // Every 2 MiB range the message touches, its edges included: a message that is a segment of a
  // larger buffer shares its edge ranges with the segments beside it. The kernel collapses the
  // ranges that lie wholly inside one mapping, the rest stays as it is.
  const auto at = reinterpret_cast<uintptr_t>(data);
  const uintptr_t lo = at & ~(kHugePageBytes - 1);
  const uintptr_t hi = (at + bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  if (tried_.size() + (hi - lo) / kHugePageBytes > kMaxRanges) return false;
  // One call per range: the kernel stops a call at the first range it refuses (one that reaches
  // outside the mapping, as the first of a malloc'd buffer often does), which must not cost the
  // ranges after it.
  bool asked = false;
  for (uintptr_t p = lo; p < hi; p += kHugePageBytes) {
    if (!tried_.insert(p).second) continue;  // tried before: never again
    asked = true;
    if (::madvise(reinterpret_cast<void*>(p), kHugePageBytes, MADV_COLLAPSE) == 0) {
      ++collapsed_;
    } else {
      ++refused_;
    }
  }
  return asked && mostly_huge(data, bytes);
}

}  // namespace braid::transport::shm
