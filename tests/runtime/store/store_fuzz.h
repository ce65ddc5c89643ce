// tests/runtime/store/store_fuzz.h - fuzz entry points for the store's network parsers.
//
// Each feeds the bytes to the real parser and to a real TcpStoreServer over a socket (one
// server per process, started on first use), then checks the server still serves a good
// client. It aborts (__builtin_trap) only on a real defect: a crash, a hang, a reply that is not
// a clean error, or a server that stopped serving. libFuzzer drivers: store_handshake_fuzzer.cc,
// store_frames_fuzzer.cc; bounded random runs: store_fuzz_test.cc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::store_test {

// The bytes as a handshake: the server's hello parser (client side), the client's answer and the
// verdict parsers, and a real server receiving them instead of an answer.
void fuzz_store_handshake(const uint8_t* data, size_t size);

// The bytes as the request stream of a connection that completed its handshake.
void fuzz_store_frames(const uint8_t* data, size_t size);

}  // namespace braid::store_test
