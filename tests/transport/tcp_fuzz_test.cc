// Bounded, seeded runs of the tcp fuzzers (tcp_fuzz.h): hand-made seeds (a right hello, other
// versions, a forged proof; valid frame sequences) and mutations of them aimed at the fields a
// parser trusts (counts, ranks, indexes, lengths, offsets). A defect aborts the process.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/job_secret.h"
#include "tests/transport/stderr_capture.h"
#include "tests/transport/tcp_fuzz.h"
#include "transport/tcp/wire_format.h"

namespace braid::transport::testing {
namespace {

using Bytes = std::vector<uint8_t>;

template <typename T>
void append(Bytes& b, const T& v) {
  const size_t at = b.size();
  b.resize(at + sizeof v);
  std::memcpy(b.data() + at, &v, sizeof v);
}

// A seed and the offsets of the integer fields worth aiming at, with their widths.
struct Seed {
  Bytes bytes;
  std::vector<std::pair<size_t, size_t>> fields;
};

Bytes hello(int from, int to, uint16_t nsocks = 1, uint16_t index = 0, uint16_t version = transport::kProtocolVersion) {
  transport::Handshake h;
  h.version = version, h.comm_id = 7, h.from_rank = from, h.to_rank = to, h.nsocks = nsocks, h.socket_index = index;
  h.nonce = auth::fresh_nonce();
  Bytes b;
  append(b, h);
  return b;
}

std::vector<Seed> handshake_seeds() {
  const std::vector<std::pair<size_t, size_t>> fields = {{4, 2}, {6, 2}, {8, 8}, {16, 4}, {20, 4}, {24, 2}};
  std::vector<Seed> seeds;
  seeds.push_back({hello(1, 0), fields});
  Bytes forged = hello(1, 0);
  forged.resize(forged.size() + transport::kProofBytes, 0x5a);  // a proof without the answer's nonce
  seeds.push_back({forged, fields});
  seeds.push_back({hello(1, 0, 3, 2), fields});
  seeds.push_back({hello(0, 0), fields});
  Bytes v2 = hello(1, 0, 1, 0, 2);
  v2.resize(176);
  seeds.push_back({v2, fields});
  Bytes v1 = hello(1, 0, 1, 0, 1);
  v1.resize(32);
  seeds.push_back({v1, fields});
  const char http[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  seeds.push_back({Bytes(http, http + sizeof http - 1), {}});
  seeds.push_back({{}, {}});
  return seeds;
}

// Frames as a peer sends them for the fuzzers' receives (capacities 0, 64, 4096, 70001).
std::vector<Seed> frame_seeds() {
  auto frames = [](const std::vector<std::tuple<uint64_t, uint64_t, uint64_t, uint32_t>>& list) {
    Seed s;
    for (auto [seq, total, offset, len] : list) {
      tcp::FrameHeader h;
      h.seq = seq, h.total_len = total, h.offset = offset, h.slice_len = len;
      const size_t at = s.bytes.size();
      for (auto [o, w] : std::vector<std::pair<size_t, size_t>>{{0, 2}, {2, 1}, {4, 4}, {8, 8}, {16, 8}, {24, 8}}) {
        s.fields.emplace_back(at + o, w);
      }
      append(s.bytes, h);
      for (uint32_t i = 0; i < len; ++i) s.bytes.push_back(static_cast<uint8_t>(seq * 31 + offset + i));
    }
    return s;
  };
  return {
      frames({{0, 0, 0, 0}, {1, 64, 0, 64}, {2, 4096, 0, 2048}, {2, 4096, 2048, 2048},
              {3, 70001, 0, 30000}, {3, 70001, 30000, 40001}}),
      frames({{0, 1, 0, 1}, {1, 10, 0, 10}}),               // larger than its receive, then a good one
      frames({{1, 64, 0, 64}, {0, 0, 0, 0}, {2, 5, 0, 5}}),  // out of order
      frames({{3, 70001, 40001, 30000}, {3, 70001, 0, 40001}}),
  };
}

Bytes mutate(const Seed& seed, std::mt19937_64& rng) {
  Bytes b = seed.bytes;
  const int n = 1 + static_cast<int>(rng() % 4);
  const uint64_t edge[] = {0, 1, 2, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff,
                           0xffffffffffffffffull, 1ull << 30, 70001, 4096, 65};
  for (int i = 0; i < n; ++i) {
    switch (rng() % 6) {
      case 0:  // a bit
        if (!b.empty()) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // a byte
        if (!b.empty()) b[rng() % b.size()] = static_cast<uint8_t>(rng());
        break;
      case 2:
      case 3: {  // a field set to a boundary value
        if (seed.fields.empty()) break;
        auto [at, width] = seed.fields[rng() % seed.fields.size()];
        const uint64_t v = edge[rng() % std::size(edge)];
        if (at + width <= b.size()) std::memcpy(b.data() + at, &v, width);
        break;
      }
      case 4:  // cut short
        if (!b.empty()) b.resize(rng() % b.size());
        break;
      default: {  // more bytes
        const size_t extra = rng() % 300;
        for (size_t k = 0; k < extra; ++k) b.push_back(static_cast<uint8_t>(rng()));
      }
    }
  }
  return b;
}

// Seeds as they are, then mutations, then plain random bytes.
void run(void (*fuzz)(const uint8_t*, size_t), const std::vector<Seed>& seeds, int mutations, uint64_t rng_seed) {
  StderrCapture quiet;  // every refused stranger or failed connection logs a line
  std::mt19937_64 rng(rng_seed);
  for (const Seed& s : seeds) fuzz(s.bytes.data(), s.bytes.size());
  for (int i = 0; i < mutations; ++i) {
    Bytes b = mutate(seeds[rng() % seeds.size()], rng);
    fuzz(b.data(), b.size());
  }
  for (int i = 0; i < mutations / 10; ++i) {
    Bytes b(rng() % 512);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    fuzz(b.data(), b.size());
  }
}

TEST(TcpFuzz, Handshake) { run(fuzz_tcp_handshake, handshake_seeds(), 2500, 17); }

TEST(TcpFuzz, Frames) { run(fuzz_tcp_frames, frame_seeds(), 2500, 23); }

}  // namespace
}  // namespace braid::transport::testing
