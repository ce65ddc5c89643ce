#include "runtime/engine/run_cache.h"

#include <algorithm>
#include <iterator>

namespace braid {

std::unique_ptr<OpRun> RunCache::take(const RunShape& shape) {
  // From the back: a loop of one shape finds its run there.
  for (auto it = runs_.rbegin(); it != runs_.rend(); ++it) {
    if (it->shape == shape && !it->lent) {
      std::unique_ptr<OpRun> run = std::move(it->run);
      runs_.erase(std::next(it).base());
      return run;
    }
  }
  return nullptr;
}

OpRun* RunCache::lend(const RunShape& shape) {
  for (auto it = runs_.rbegin(); it != runs_.rend(); ++it) {
    if (it->shape == shape && !it->lent) {
      it->lent = true;
      return it->run.get();
    }
  }
  return nullptr;
}

void RunCache::ran(const OpRun* run) {
  for (auto it = runs_.rbegin(); it != runs_.rend(); ++it) {
    if (it->run.get() == run) {
      it->used = ++used_;
      it->lent = false;
      return;
    }
  }
}

void RunCache::drop(const OpRun* run) {
  for (auto it = runs_.begin(); it != runs_.end(); ++it) {
    if (it->run.get() == run) {
      runs_.erase(it);
      return;
    }
  }
}

void RunCache::keep(const RunShape& shape, std::unique_ptr<OpRun> run) {
  if (runs_.size() == kSize) {  // the one used longest ago, of those not lent (a group lends at most half)
    runs_.erase(std::min_element(runs_.begin(), runs_.end(), [](const Kept& a, const Kept& b) {
      return !a.lent && (b.lent || a.used < b.used);
    }));
  }
  runs_.push_back(Kept{shape, std::move(run), ++used_});
}

}  // namespace braid
