#include "tests/runtime/faults/failure_board_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) { braid::fuzz_failure_board(d, n); return 0; }
