// Bounded random and mutated inputs for the store's network parsers (store_fuzz.h), against a
// real server: each case must end in a clean error or clean replies, and the server must keep
// serving a good client. Seeded, so a failure repeats.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "runtime/store/store_protocol.h"
#include "tests/runtime/store/store_fuzz.h"

namespace braid {
namespace {

using store::FrameWriter;
using store::Opcode;

std::string random_bytes(std::mt19937& rng, size_t max_len) {
  std::string s(rng() % (max_len + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Flips, overwrites, inserts, deletes and truncates a few bytes; sometimes rewrites a length.
std::string mutate(std::string s, std::mt19937& rng) {
  int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    size_t at = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 6) {
      case 0:
        if (!s.empty()) s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
        break;
      case 1:
        if (!s.empty()) s[at] = static_cast<char>(rng());
        break;
      case 2:
        s.insert(at, 1, static_cast<char>(rng()));
        break;
      case 3:
        if (!s.empty()) s.erase(at, 1 + rng() % 8);
        break;
      case 4:
        s.resize(at);
        break;
      default: {  // a length field anywhere: 0, small, huge
        if (s.size() < 4) break;
        uint32_t v = rng() % 3 == 0 ? 0xffffffffu : rng() % 3 == 0 ? 0 : rng() % 70000;
        size_t p = rng() % (s.size() - 3);
        for (int i = 0; i < 4; ++i) s[p + i] = static_cast<char>((v >> (8 * i)) & 0xff);
      }
    }
  }
  return s;
}

void run(void (*fuzz)(const uint8_t*, size_t), const std::string& input) {
  fuzz(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

TEST(StoreFuzz, HandshakeRandomAndMutated) {
  std::mt19937 rng(1717);
  std::string nonce(32, 'n'), proof(32, 'p');
  const std::string answer =
      FrameWriter().u32(store::kHandshakeMagic).u16(store::kProtocolVersion).u8(1).raw(nonce).raw(proof).bytes("fuzz-job").finish();
  const std::string hello = FrameWriter().u32(store::kHandshakeMagic).u16(store::kProtocolVersion).u8(1).raw(nonce).bytes("fuzz-job").finish();
  run(store_test::fuzz_store_handshake, answer);
  run(store_test::fuzz_store_handshake, "");
  for (int i = 0; i < 2000; ++i) {
    std::string input = i % 3 == 0 ? random_bytes(rng, 700) : mutate(i % 3 == 1 ? answer : hello, rng);
    run(store_test::fuzz_store_handshake, input);
  }
}

TEST(StoreFuzz, FramesRandomAndMutated) {
  std::mt19937 rng(1718);
  auto op = [](Opcode o) { return FrameWriter().u8(static_cast<uint8_t>(o)); };
  const std::vector<std::string> seeds = {
      op(Opcode::set).bytes("k").bytes("v").finish(),
      op(Opcode::get).bytes("k").i64(10).finish(),
      op(Opcode::add).bytes("n").i64(3).finish(),
      op(Opcode::compare_set).bytes("k").bytes("v").bytes("w").finish(),
      op(Opcode::wait).keys({"k", "never"}).i64(20).finish(),
      op(Opcode::check).keys({"k"}).finish(),
      op(Opcode::delete_key).bytes("k").finish(),
      op(Opcode::num_keys).finish(),
  };
  for (const std::string& s : seeds) run(store_test::fuzz_store_frames, s);
  for (int i = 0; i < 2000; ++i) {
    std::string input;
    if (i % 4 == 0) {
      input = random_bytes(rng, 600);
    } else {
      for (int f = 0, n = 1 + static_cast<int>(rng() % 4); f < n; ++f) input += seeds[rng() % seeds.size()];
      input = mutate(input, rng);
    }
    run(store_test::fuzz_store_frames, input);
  }
}

}  // namespace
}  // namespace braid
