#include "transport/shm/page_collapse.h"

#include <sys/mman.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // <asm-generic/mman-common.h> of Linux 6.1; older headers lack it
#endif

namespace braid::transport::shm {

bool PageCollapse::mostly_huge(const void* data, size_t bytes) const {
  return worth_single_copy(pages_.small_bytes(data, bytes), bytes);
}

bool PageCollapse::make_huge(const void* data, size_t bytes) {
  if (mostly_huge(data, bytes)) return true;
  if (!pages_.available()) return false;  // the answer afterwards could not be trusted
  // Every 2 MiB range the message touches, its edges included: a message that is a segment of a
  // larger buffer shares its edge ranges with the segments beside it.
  const auto at = reinterpret_cast<uintptr_t>(data);
  const uintptr_t lo = at & ~(kHugePageBytes - 1);
  const uintptr_t hi = (at + bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  if (asked_.size() + (hi - lo) / kHugePageBytes > kMaxRanges) return false;
  // One call per range: the kernel stops a call at the first range it refuses (one that reaches
  // outside the mapping, as the first of a malloc'd buffer often does), which must not cost the
  // ranges after it. A range already huge is not asked; one asked too often is left small.
  bool asked = false;
  for (uintptr_t p = lo; p < hi; p += kHugePageBytes) {
    uint8_t& times = asked_[p];
    if (times >= kMaxCollapses || pages_.all_huge(reinterpret_cast<const void*>(p), kHugePageBytes)) continue;
    asked = true;
    if (::madvise(reinterpret_cast<void*>(p), kHugePageBytes, MADV_COLLAPSE) == 0) {
      ++times;
      ++collapsed_;
    } else {
      times = kMaxCollapses;
      ++refused_;
    }
  }
  return asked && mostly_huge(data, bytes);
}

}  // namespace braid::transport::shm
