// transport/shm/huge_pages.h - whether a buffer of this process lies wholly in huge pages.
//
// Why the shm transport asks: process_vm_readv pins and copies the remote buffer one 4 KiB page
// at a time, which makes it several times slower than memcpy for a buffer on 4 KiB pages and
// about as fast for one on transparent huge pages (bench/shm_cma_bench.c, docs/shm.md). So a
// large send goes single-copy only from huge pages.
//
// The answer comes from the kernel's page tables through the PAGEMAP_SCAN ioctl on
// /proc/self/pagemap (Linux 6.7 and later): one call over the range, stopping at the first page
// that is not huge (or, for small_bytes, returning the runs of pages that are not). Where the
// kernel lacks it, or a page is not present, the answer is "no".
#pragma once

#include <cstddef>

#include "common/status.h"
#include "transport/common/socket_setup.h"

namespace braid::transport::shm {

class HugePageQuery {
 public:
  // Opens /proc/self/pagemap; an object that could not open it answers "no" to everything.
  HugePageQuery();
  // True when every page of [data, data + bytes) is mapped by a huge page (bytes > 0).
  bool all_huge(const void* data, size_t bytes) const;
  // How many bytes of [data, data + bytes) are not on huge pages (all of them where the kernel
  // cannot tell; an upper bound where the small pages come in very many runs).
  size_t small_bytes(const void* data, size_t bytes) const;
  // Whether the kernel answers at all (it knows PAGEMAP_SCAN): an empty query.
  bool available() const;

 private:
  UniqueFd pagemap_;
};

}  // namespace braid::transport::shm
