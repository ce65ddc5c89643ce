// tests/tools/braidrun/etcd_reply_fuzz.h - what an etcd member (or whatever answers on its port)
// sends back, fed as arbitrary bytes to EtcdStore's parsers (a GoogleTest runs it on bounded
// seeded inputs, the libFuzzer entry etcd_reply_fuzzer.cc for longer runs).
//
// Aborts only on a real defect: a crash, an error that is not a clean protocol error with a
// message, or a string that does not survive json_quote and parse_json.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::braidrun::etcd {

// parse_http_reply on the bytes, parse_json on its body (or on the bytes when they are no HTTP),
// base64_decode on every string member of a parsed object, and json_quote/parse_json on the
// bytes as a string.
void fuzz_etcd_reply(const uint8_t* data, size_t size);

}  // namespace braid::braidrun::etcd
