// runtime/engine/run_cache.h - finished runs kept for operations of the same shape.
//
// A training loop repeats a few collectives, and building the schedule, the executor and the
// headers anew is a large part of a small operation's CPU (docs/code_figures.md). So a finished run is kept, keyed by all that fixes its schedule on this
// communicator, and the next operation of that shape runs it again (OpRun::reuse). Several runs
// of one shape may be kept: operations of a stream overlap.
//
// Not thread-safe: only the thread that runs operations (the one holding the engine) uses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "collectives/collective.h"
#include "runtime/engine/op_run.h"

namespace braid {

// What fixes an operation's schedule on one communicator: a key of 24 bytes without padding,
// compared whole (three words) each time the cache looks for a run.
struct RunShape {
  size_t count;
  int root;
  int peer;  // send/recv: the other rank; -1 for collectives
  collectives::Kind kind;
  DType dtype;
  Op op;
  collectives::Algo algo;  // the preference (RunOptions::algo), which selection starts from
  uint8_t buffers;         // send null, recv null, in place: what the schedule depends on
  uint8_t unused[3] = {};
  bool operator==(const RunShape& o) const { return std::memcmp(this, &o, sizeof *this) == 0; }
};
static_assert(sizeof(RunShape) == 24 && std::has_unique_object_representations_v<RunShape>,
              "RunShape is compared as bytes: no padding");

class RunCache {
 public:
  static constexpr size_t kSize = 8;
  static constexpr size_t kMaxBytes = size_t{1} << 20;  // count x element size

  // The shape of `args` under `algo`, or nothing when its run is not worth keeping. `staged`:
  // its buffers are pinned copies of GPU memory (built anew each time).
  // Inline: every operation of the lean paths asks it.
  static std::optional<RunShape> shape_of(const collectives::CollectiveArgs& a, bool staged, collectives::Algo algo) {
    // Uneven and split forms (count vectors) and staged GPU buffers are built anew each time.
    // A send or receive is kept per peer (its tag is in the header, which reuse rewrites).
    if (!a.counts.empty() || !a.send_counts.empty() || !a.recv_counts.empty() || staged) return std::nullopt;
    // Above this, building costs little beside moving the bytes, and a kept run would hold its
    // scratch and landing memory (and, as below it, a header buffer per peer it hears from).
    if (a.count > kMaxBytes || a.count * dtype_size(a.dtype) > kMaxBytes) return std::nullopt;
    const auto buffers = static_cast<uint8_t>((a.send == nullptr ? 1 : 0) | (a.recv == nullptr ? 2 : 0) |
                                              (a.send != nullptr && a.send == a.recv ? 4 : 0));
    const bool p2p = a.kind == collectives::Kind::send || a.kind == collectives::Kind::recv;
    return RunShape{.count = a.count, .root = a.root, .peer = p2p ? a.peer : -1, .kind = a.kind, .dtype = a.dtype,
                    .op = a.op, .algo = algo, .buffers = buffers};
  }

  // A kept run of `shape`, taken out of the cache; null when none is kept (or lent).
  std::unique_ptr<OpRun> take(const RunShape& shape);
  // A kept run of `shape` to run again where it lies, left kept: a caller that runs one
  // operation (or one group) spares the taking out and putting back. A run lent is not lent or
  // taken again, nor dropped to make room, until the caller calls ran() (it finished and may run
  // again: it counts as just used) or drop() (it must not); clear() ends it. Null when none is
  // kept, or each kept one of `shape` is lent.
  OpRun* lend(const RunShape& shape);
  void ran(const OpRun* run);
  void drop(const OpRun* run);
  // Keeps a finished run, dropping the one used longest ago when full.
  void keep(const RunShape& shape, std::unique_ptr<OpRun> run);
  // Drops every kept run (the connections they name may be gone).
  void clear() { runs_.clear(); }

 private:
  struct Kept {
    RunShape shape;
    std::unique_ptr<OpRun> run;
    uint64_t used;  // when it was kept or last ran (used_), for keep()'s choice of one to drop
    bool lent = false;
  };
  std::vector<Kept> runs_;  // in the order kept
  uint64_t used_ = 0;
};

}  // namespace braid
