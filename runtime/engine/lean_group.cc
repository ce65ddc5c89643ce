#include "runtime/engine/lean_group.h"

namespace braid {

LeanGroup::LeanGroup(OpRun* const* runs, const int* after, size_t n, const OpLabel& what, const Deadline& deadline,
                     RunContext ctx)
    : n_(n), what_(what), deadline_(deadline), checks_(ctx) {
  for (size_t i = 0; i < n_; ++i) {
    runs_[i] = runs[i];
    after_[i] = after[i];
  }
}

}  // namespace braid
