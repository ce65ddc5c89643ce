// tests/runtime/faults/failure_board_fuzz.h - the failure board's parsers fed arbitrary bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid {

// Puts pieces of `data` on a store as the "abort", "progress/<r>" and "report" values another
// rank would have written, then reads them through a real FailureBoard and find_lossy_link.
// Traps on a real defect: a rank number outside the communicator handed back, or a read of
// the board that does not return.
void fuzz_failure_board(const uint8_t* data, size_t size);

}  // namespace braid
