#include "tests/runtime/engine/op_header_fuzz.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/env.h"
#include "runtime/bootstrap/agreed_settings.h"
#include "runtime/engine/op_header.h"

namespace braid {
namespace {

[[noreturn]] void defect(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz defect: %s: %s\n", what, detail.c_str());
  std::abort();
}

OpHeader valid_header() {
  OpHeader h;
  h.kind = collectives::Kind::all_reduce;
  h.comm_id = 7;
  h.issue_seq = 3;
  h.match_seq = 3;
  h.count = 1024;
  h.segment = 262144;
  h.ring_depth = 1;
  h.algo = collectives::Algo::ring;
  return h;
}

bool same_fields(const OpHeader& a, const OpHeader& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.op == b.op && a.comm_id == b.comm_id &&
         a.issue_seq == b.issue_seq && a.match_seq == b.match_seq && a.count == b.count && a.aux == b.aux &&
         a.root == b.root && a.flags == b.flags && a.segment == b.segment && a.ring_depth == b.ring_depth &&
         a.algo == b.algo;
}

void check_pair(const OpHeader& mine, const OpHeader& theirs) {
  const Status s = check_headers(mine, 0, theirs, 1, "127.0.0.1:1");
  if (!s.is_ok() && (s.code() != ErrorCode::mismatch || s.message().empty())) {
    defect("check_headers gave something other than ok or a mismatch", s.message());
  }
}

void decode_one(const unsigned char* in, size_t bytes) {
  Result<OpHeader> h = OpHeader::decode(in, bytes);
  if (!h.is_ok()) {
    if (h.status().code() != ErrorCode::protocol || h.status().message().empty()) {
      defect("decode failed without a protocol error", h.status().message());
    }
    return;
  }
  if (bytes != OpHeader::kBytes) defect("decode accepted a length other than 64", std::to_string(bytes));
  unsigned char again[OpHeader::kBytes];
  h.value().encode(again);
  Result<OpHeader> back = OpHeader::decode(again, sizeof again);
  if (!back.is_ok() || !same_fields(back.value(), h.value())) defect("encode/decode does not round-trip", "");
  (void)h.value().describe();
  check_pair(valid_header(), h.value());
  check_pair(h.value(), valid_header());
  check_pair(h.value(), h.value());
}

}  // namespace

void fuzz_op_header(const uint8_t* data, size_t size) {
  // A copy the size of the input: reads past it are the sanitizers' to find.
  std::vector<unsigned char> bytes(data, data + size);
  decode_one(bytes.data(), bytes.size());
  if (size > OpHeader::kBytes) decode_one(bytes.data(), OpHeader::kBytes);
}

void fuzz_settings_card(const uint8_t* data, size_t size) {
  const std::string mine = settings_card(Env{});
  const std::string theirs(reinterpret_cast<const char*>(data), size);
  for (const auto& cards : {std::vector<std::string>{mine, theirs}, std::vector<std::string>{theirs, mine, theirs}}) {
    const Status s = check_settings(cards);
    if (s.is_ok()) continue;
    if ((s.code() != ErrorCode::mismatch && s.code() != ErrorCode::invalid_argument) || s.message().empty()) {
      defect("check_settings gave something other than ok, a mismatch or a bad card", s.message());
    }
  }
}

}  // namespace braid
