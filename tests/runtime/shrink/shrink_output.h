// tests/runtime/shrink/shrink_output.h - reading shrink_rank's output (its lines start
// "<tag> rank=<r>"), for the shrink tests on the host and over ib in the guest.
#pragma once

#include <cstddef>
#include <string>

namespace braid::testing {

inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Rank `rank`'s line that starts with `tag` ("" when none).
inline std::string line_of(const std::string& output, const std::string& tag, int rank) {
  const std::string want = tag + " rank=" + std::to_string(rank);
  for (size_t at = 0; at < output.size();) {
    size_t end = output.find('\n', at);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(at, end - at);
    if (line.rfind(want + " ", 0) == 0 || line == want) return line;
    at = end + 1;
  }
  return "";
}

}  // namespace braid::testing
