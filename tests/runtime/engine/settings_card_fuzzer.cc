#include "tests/runtime/engine/op_header_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) {
  braid::fuzz_settings_card(d, n);
  return 0;
}
