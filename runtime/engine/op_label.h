// runtime/engine/op_label.h - how messages name an operation or a group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectives/collective.h"

namespace braid {

// An operation's (or a group's) name in messages: "all_reduce #12", "group of 2 operations
// #12-#13". Kept as numbers and built only when a message or log line is written: every
// operation carries one, and formatting costs more than a small operation's own bookkeeping.
struct OpLabel {
  const char* kind = nullptr;  // the collective; null for a group
  uint64_t first = 0;          // issue numbers (seq)
  uint64_t last = 0;
  size_t members = 0;  // a group's size
  static OpLabel one(collectives::Kind k, uint64_t seq) { return OpLabel{collectives::to_string(k), seq, seq, 0}; }
  static OpLabel group(uint64_t first, uint64_t last, size_t members) { return OpLabel{nullptr, first, last, members}; }
  std::string str() const;
};

}  // namespace braid
