#include "runtime/engine/op_label.h"

namespace braid {

std::string OpLabel::str() const {
  if (kind != nullptr) return std::string(kind) + " #" + std::to_string(first);
  return "group of " + std::to_string(members) + " operations #" + std::to_string(first) + "-#" + std::to_string(last);
}

}  // namespace braid
