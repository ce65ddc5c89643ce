// tests/runtime/engine/op_header_fuzz.h - the network parsers of operation matching, fed arbitrary
// bytes (common convention: a GoogleTest runs them on bounded seeded inputs, the libFuzzer
// entries op_header_fuzzer.cc and settings_card_fuzzer.cc for longer runs).
//
// Each aborts only on a real defect: a crash, an error that is not a clean one, a header that
// does not survive encode/decode, a check that calls a mismatch anything but a mismatch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid {

// OpHeader::decode on the bytes (whole, and the first 64 when longer), then check_headers of the
// decoded header against a valid one, both ways round.
void fuzz_op_header(const uint8_t* data, size_t size);

// check_settings on a valid card and the bytes as a peer's card (they come from the store).
void fuzz_settings_card(const uint8_t* data, size_t size);

}  // namespace braid
