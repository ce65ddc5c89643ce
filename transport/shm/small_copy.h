// transport/shm/small_copy.h - the copy of a small message's bytes into and out of a ring record.
#pragma once

#include <cstddef>
#include <cstring>

namespace braid::transport::shm {

// Copies n bytes; up to 128 without a call into libc, in a few loads and stores that may overlap
// (a small message's header and payload: a call and its size dispatch would cost more than the
// copy).
inline void copy_bytes(unsigned char* dst, const unsigned char* src, size_t n) {
  if (n > 128) {
    std::memcpy(dst, src, n);
  } else if (n > 64) {
    std::memcpy(dst, src, 64);
    std::memcpy(dst + n - 64, src + n - 64, 64);
  } else if (n > 32) {
    std::memcpy(dst, src, 32);
    std::memcpy(dst + n - 32, src + n - 32, 32);
  } else if (n >= 16) {
    std::memcpy(dst, src, 16);
    std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(dst, src, 8);
    std::memcpy(dst + n - 8, src + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(dst, src, 4);
    std::memcpy(dst + n - 4, src + n - 4, 4);
  } else if (n > 0) {
    dst[0] = src[0];
    dst[n / 2] = src[n / 2];
    dst[n - 1] = src[n - 1];
  }
}

}  // namespace braid::transport::shm
