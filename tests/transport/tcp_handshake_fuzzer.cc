// libFuzzer entry: arbitrary bytes to a listening tcp transport's accept path (tcp_fuzz.h).
#include "tests/transport/tcp_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) {
  braid::transport::testing::fuzz_tcp_handshake(d, n);
  return 0;
}
