#include "transport/shm/huge_pages.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace braid::transport::shm {

namespace {

// The PAGEMAP_SCAN interface of <linux/fs.h> (Linux 6.7), spelled out here because the build's
// kernel headers may predate it. The layout is kernel ABI.
struct PageRegion {
  uint64_t start, end, categories;
};
struct PmScanArg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
  uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);
constexpr uint64_t kPageIsHuge = 1u << 6;
constexpr uint64_t kPage = 4096;

}  // namespace

HugePageQuery::HugePageQuery() : pagemap_(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC)) {}

bool HugePageQuery::all_huge(const void* data, size_t bytes) const {
  if (pagemap_.get() < 0 || bytes == 0) return false;
  const auto at = reinterpret_cast<uint64_t>(data);
  PageRegion first_small{};
  PmScanArg a;
  std::memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.start = at & ~(kPage - 1);
  a.end = (at + bytes + kPage - 1) & ~(kPage - 1);
  a.vec = reinterpret_cast<uint64_t>(&first_small);
  a.vec_len = 1;
  a.max_pages = 1;  // one page that is not huge settles it
  // Inverting "huge" and requiring it selects the pages that are not huge.
  a.category_inverted = kPageIsHuge;
  a.category_mask = kPageIsHuge;
  a.return_mask = kPageIsHuge;
  return ::ioctl(pagemap_.get(), kPagemapScan, &a) == 0;  // the number of regions found
}

size_t HugePageQuery::small_bytes(const void* data, size_t bytes) const {
  if (bytes == 0) return 0;
  if (pagemap_.get() < 0) return bytes;
  const auto at = reinterpret_cast<uint64_t>(data);
  const uint64_t first = at & ~(kPage - 1), last = (at + bytes + kPage - 1) & ~(kPage - 1);
  PageRegion runs[16]{};
  PmScanArg a;
  std::memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.start = first;
  a.end = last;
  a.vec = reinterpret_cast<uint64_t>(runs);
  a.vec_len = sizeof runs / sizeof runs[0];
  a.category_inverted = kPageIsHuge;  // as in all_huge: the pages that are not huge
  a.category_mask = kPageIsHuge;
  a.return_mask = kPageIsHuge;
  const int n = ::ioctl(pagemap_.get(), kPagemapScan, &a);
  if (n < 0) return bytes;
  // Whole pages of the runs, clipped to the range asked; where the walk stopped early (more runs
  // than fit), the rest counts as small.
  uint64_t small = a.walk_end < last ? last - a.walk_end : 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t s = std::max<uint64_t>(runs[i].start, at), e = std::min<uint64_t>(runs[i].end, at + bytes);
    if (e > s) small += e - s;
  }
  return static_cast<size_t>(std::min<uint64_t>(small, bytes));
}

bool HugePageQuery::available() const {
  if (pagemap_.get() < 0) return false;
  PmScanArg a;
  std::memset(&a, 0, sizeof a);
  a.size = sizeof a;  // an empty range: only whether the call exists
  return ::ioctl(pagemap_.get(), kPagemapScan, &a) == 0;
}

}  // namespace braid::transport::shm
