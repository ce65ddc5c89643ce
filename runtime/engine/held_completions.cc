#include "runtime/engine/held_completions.h"

namespace braid {

void HeldCompletions::complete_last(const std::shared_ptr<detail::WorkState>& work, Status s) {
  MutexLock lock(mu_);
  if (holding_) {
    held_.emplace_back(work, std::move(s));
    return;
  }
  for (auto& [w, st] : held_) w->complete(std::move(st));  // ran before this one
  held_.clear();
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
}

}  // namespace braid
