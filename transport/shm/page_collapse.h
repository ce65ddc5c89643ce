// transport/shm/page_collapse.h - moves the pages under a large send of this process onto huge pages.
//
// Why: the receiver of a single-copy message reads it with process_vm_readv, which pins the
// sender's pages one page-table entry at a time. Over 4 KiB pages that per-page work leaves the
// copy well behind memcpy; over 2 MiB pages it runs at memcpy's speed, because the
// destination side is an ordinary copy into the reader's own memory (bench/shm_copy_paths.c,
// docs/shm.md). Ordinary malloc'd buffers sit on 4 KiB pages unless the program asked for huge
// ones, so the sender asks the kernel to rebuild the 2 MiB ranges under the message on huge
// pages (madvise MADV_COLLAPSE, Linux 6.1+): the bytes stay where they are, at the same
// addresses, only their backing changes, as khugepaged does in the background where a program
// asked for huge pages. That costs a few memcpys of the range, once; every later send from the
// same buffer then goes single-copy at memcpy's speed. A range at the edge of a message may hold
// other memory of the program: it is moved the same way, its bytes unchanged (pages never
// touched there become present, at most 2 MiB at each end of a buffer).
//
// A range is collapsed at most kMaxCollapses times in the life of the process. Its pages are
// small again when the program freed the buffer and got new memory at the same address (a
// benchmark moving on to the next size, a loop that allocates a fresh buffer per message) or the
// kernel split them; from the outside that looks like reuse, so the cap bounds what a program
// that churns its buffers pays, after which the ring carries what stays small. The kernel
// refuses where the program or the administrator said no (MADV_NOHUGEPAGE, PR_SET_THP_DISABLE,
// THP "never"), or where it finds no free huge page: such a range is not asked again.
//
// Not thread-safe: the transport that owns it is driven by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "transport/shm/huge_pages.h"

namespace braid::transport::shm {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Whether a message with `small` of its `bytes` on 4 KiB pages is worth reading single-copy:
// its huge-page part reads at memcpy's speed and its 4 KiB part slower than the ring moves
// it, so single copy wins up to a share of small pages that docs/shm.md derives from the
// measured rates ("Which messages go single-copy"); 3/5 stays below that break-even.
inline bool worth_single_copy(size_t small, size_t bytes) { return bytes > 0 && 5 * small <= 3 * bytes; }

class PageCollapse {
 public:
  // `pages` answers which pages are huge; it must outlive this object.
  explicit PageCollapse(const HugePageQuery& pages) : pages_(pages) {}
  PageCollapse(const PageCollapse&) = delete;
  PageCollapse& operator=(const PageCollapse&) = delete;

  // Whether [data, data + bytes) is (now) worth_single_copy(). Collapses the 2 MiB ranges it
  // touches that are small and may still be asked; otherwise answers from the pages as they
  // are, with one page query.
  bool make_huge(const void* data, size_t bytes);
  // Whether [data, data + bytes) is worth_single_copy() as its pages are (no collapse).
  bool mostly_huge(const void* data, size_t bytes) const;

  // How many 2 MiB ranges the kernel collapsed and refused to (tests read them).
  uint64_t collapsed() const { return collapsed_; }
  uint64_t refused() const { return refused_; }

  // Collapses per 2 MiB range, at most.
  static constexpr uint8_t kMaxCollapses = 4;
  // At most this many 2 MiB ranges are remembered (128 GiB of address space); past it, nothing
  // more is collapsed.
  static constexpr size_t kMaxRanges = size_t{1} << 16;

 private:
  const HugePageQuery& pages_;
  // By 2 MiB-aligned start: collapses so far, or kMaxCollapses once the kernel refused one.
  std::unordered_map<uintptr_t, uint8_t> asked_;
  uint64_t collapsed_ = 0, refused_ = 0;
};

}  // namespace braid::transport::shm
