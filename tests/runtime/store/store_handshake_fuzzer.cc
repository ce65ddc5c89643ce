#include "tests/runtime/store/store_fuzz.h"
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) { braid::store_test::fuzz_store_handshake(d, n); return 0; }
