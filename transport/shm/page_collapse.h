// transport/shm/page_collapse.h - puts a large send buffer of this process on huge pages, once.
//
// Why: the receiver of a single-copy message reads it with process_vm_readv, which pins the
// sender's pages one page-table entry at a time. Over 4 KiB pages that per-page work makes the
// copy about half as fast as memcpy; over 2 MiB pages it runs at memcpy's speed, because the
// destination side is an ordinary copy into the reader's own memory (bench/shm_cma_bench.c,
// docs/shm.md). Ordinary malloc'd buffers sit on 4 KiB pages unless the program asked for huge
// ones, so the sender asks the kernel to rebuild the 2 MiB ranges under the message on huge
// pages (madvise MADV_COLLAPSE, Linux 6.1+): the bytes stay where they are, at the same
// addresses, only their backing changes, as khugepaged does in the background where a program
// asked for huge pages. That costs a few memcpys of the range, once; every later send from the
// same buffer then goes single-copy at memcpy's speed. A range at the edge of a message may hold
// other memory of the program: it is moved the same way, its bytes unchanged (pages never
// touched there become present, at most 2 MiB at each end of a buffer).
//
// A range is collapsed at most once in the life of the process: if its pages are small again
// later (the program freed the buffer and got new memory at the same address, or the kernel
// split the pages), the sender does not pay again; it sends through the ring. The kernel refuses
// where the program or the administrator said no (MADV_NOHUGEPAGE, PR_SET_THP_DISABLE, THP
// "never"), or where it finds no free huge page; those ranges are remembered as tried too.
//
// Not thread-safe: the transport that owns it is driven by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_set>

#include "transport/shm/huge_pages.h"

namespace braid::transport::shm {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

class PageCollapse {
 public:
  // `pages` answers which pages are huge; it must outlive this object.
  explicit PageCollapse(const HugePageQuery& pages) : pages_(pages) {}
  PageCollapse(const PageCollapse&) = delete;
  PageCollapse& operator=(const PageCollapse&) = delete;

  // Whether at least half of [data, data + bytes) is (now) on huge pages. Collapses the 2 MiB
  // ranges it touches that were never tried before; a buffer whose ranges were all tried
  // answers from its pages as they are, with one page query.
  bool make_huge(const void* data, size_t bytes);
  // Whether at least half of [data, data + bytes) is on huge pages (no collapse).
  bool mostly_huge(const void* data, size_t bytes) const;

  // How many 2 MiB ranges the kernel collapsed and refused to (tests read them).
  uint64_t collapsed() const { return collapsed_; }
  uint64_t refused() const { return refused_; }

  // At most this many 2 MiB ranges are remembered (128 GiB of address space); past it, nothing
  // more is collapsed.
  static constexpr size_t kMaxRanges = size_t{1} << 16;

 private:
  const HugePageQuery& pages_;
  std::unordered_set<uintptr_t> tried_;  // 2 MiB-aligned starts collapsed (or refused) before
  uint64_t collapsed_ = 0, refused_ = 0;
};

}  // namespace braid::transport::shm
