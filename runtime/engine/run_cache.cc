#include "runtime/engine/run_cache.h"

#include <algorithm>
#include <iterator>

namespace braid {

std::optional<RunShape> RunCache::shape_of(const collectives::CollectiveArgs& a, bool staged, collectives::Algo algo) {
  // Uneven and split forms (count vectors) and staged GPU buffers are built anew each time.
  // A send or receive is kept per peer (its tag is in the header, which reuse rewrites).
  if (!a.counts.empty() || !a.send_counts.empty() || !a.recv_counts.empty() || staged) return std::nullopt;
  // Above this, building costs little beside moving the bytes, and a kept run would hold its
  // scratch and landing memory (and, as below it, a header buffer per peer it hears from).
  if (a.count > kMaxBytes || a.count * dtype_size(a.dtype) > kMaxBytes) return std::nullopt;
  const uint8_t buffers = static_cast<uint8_t>((a.send == nullptr ? 1 : 0) | (a.recv == nullptr ? 2 : 0) |
                                               (a.send != nullptr && a.send == a.recv ? 4 : 0));
  const bool p2p = a.kind == collectives::Kind::send || a.kind == collectives::Kind::recv;
  return RunShape{a.kind, a.count, a.dtype, a.op, a.root, algo, buffers, p2p ? a.peer : -1};
}

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
