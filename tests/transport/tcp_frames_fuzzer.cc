// libFuzzer entry: arbitrary frames after a valid tcp handshake (tcp_fuzz.h).
#include "tests/transport/tcp_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) {
  braid::transport::testing::fuzz_tcp_frames(d, n);
  return 0;
}
