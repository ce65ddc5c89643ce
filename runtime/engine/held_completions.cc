#include "runtime/engine/held_completions.h"

namespace braid {

void HeldCompletions::complete_last(const std::shared_ptr<detail::WorkState>& work, Status s) {
  // Nothing held (and held_ grows only on the thread that holds the engine, this one): nothing
  // to complete first, and no lock to take.
  if (!holding_ && held_count_.load(std::memory_order_acquire) == 0) {
    work->complete(std::move(s));
    return;
  }
  MutexLock lock(mu_);
  if (holding_) {
    held_.emplace_back(work, std::move(s));
    held_count_.store(held_.size(), std::memory_order_release);
    return;
  }
  for (auto& [w, st] : held_) w->complete(std::move(st));  // ran before this one
  held_.clear();
  held_count_.store(0, std::memory_order_release);
  work->complete(std::move(s));
}

void HeldCompletions::complete_held() {
  if (before_complete_) {
    bool any = false;
    {
      MutexLock lock(mu_);
      any = !held_.empty();
    }
    if (any) before_complete_();
  }
  MutexLock lock(mu_);
  for (auto& [work, s] : held_) work->complete(std::move(s));
  held_.clear();
  held_count_.store(0, std::memory_order_release);  // after the completions: see complete_last
}

}  // namespace braid
