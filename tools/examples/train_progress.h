// tools/examples/train_progress.h - what a training example shows while it runs: after every
// epoch one line with its results, the time since training began and an estimate of the time
// left; on a terminal also a bar within the epoch, redrawn in place.
//
// The estimate assumes the remaining epochs (or the rest of this epoch, for the bar) run at the
// pace so far. Only the printing rank uses this; times come in as arguments so tests need no clock.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace braid::examples {

class TrainProgress {
 public:
  using Clock = std::chrono::steady_clock;

  // `bar`: draw the in-epoch bar (pass isatty(fileno(out))); without it `step` prints nothing,
  // so a log file or a pipe gets exactly one line per epoch.
  TrainProgress(std::FILE* out, bool bar, int epochs, Clock::time_point start);

  // `done` of `steps` steps of epoch `epoch` (from 0) are finished. Redraws at most ~10 times a second.
  void step(int epoch, size_t done, size_t steps, Clock::time_point now);

  // Epoch `epoch` (from 0) ended: prints "epoch E/N: RESULTS | elapsed T, about L left" (the last
  // epoch says "done" instead of an estimate) and flushes.
  void end_epoch(int epoch, const std::string& results, Clock::time_point now);

  // "12.3 s", "4 min 05 s", "1 h 02 min": the spans a training run shows.
  static std::string format_span(double seconds);

 private:
  std::FILE* out_;
  bool bar_;
  int epochs_;
  Clock::time_point start_;
  Clock::time_point epoch_start_;
  Clock::time_point last_draw_{};
  bool drawn_ = false;  // a bar is on the current line and must be cleared before a full line
};

}  // namespace braid::examples
