#include "tests/runtime/engine/op_header_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) {
  braid::fuzz_op_header(d, n);
  return 0;
}
