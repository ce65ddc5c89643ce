// tests/transport/tcp_fuzz.h - the tcp transport's network parsers fed arbitrary bytes, for
// libFuzzer (tcp_handshake_fuzzer.cc, tcp_frames_fuzzer.cc) and the bounded runs of
// tcp_fuzz_test.cc. Each aborts (after a line on stderr saying why) only on a real defect.
//
// fuzz_tcp_handshake: a stranger connects to a real listening transport (rank 0 of a job with a
// secret) and sends `data`, then hangs up; then rank 1 connects for real. Defects: the real
// connection does not form within its deadline, or does not carry a message correctly (a
// stranger took its place), or the process crashes.
//
// fuzz_tcp_frames: a connector completes the real handshake with the job's secret and then
// sends `data` as its frames, then hangs up. The acceptor has receives of several sizes posted
// (and one for every frame `data` could hold). Defects: a receive that completes with anything
// but success, ErrorCode::protocol (garbage, a message
// larger than its receive) or ErrorCode::peer_lost (the bytes ended), a byte written outside a
// receive's buffer, a receive that never completes, or a crash.
//
// Both run on one transport per engine, made on first use and kept (as a server's would be);
// the engine, io_uring or epoll, is chosen by the input's length, so both are fuzzed. Call them
// from one thread (a transport's owner: transport.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::transport::testing {

void fuzz_tcp_handshake(const uint8_t* data, size_t size);
void fuzz_tcp_frames(const uint8_t* data, size_t size);

}  // namespace braid::transport::testing
