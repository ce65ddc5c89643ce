#include "tools/examples/train_progress.h"

#include <cmath>

namespace braid::examples {
namespace {

constexpr auto kRedrawEvery = std::chrono::milliseconds(100);
// Short enough that the whole bar line fits an 80-column terminal: a wrapped line cannot be
// redrawn in place with '\r'.
constexpr size_t kBarWidth = 20;

double seconds_between(TrainProgress::Clock::time_point a, TrainProgress::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

TrainProgress::TrainProgress(std::FILE* out, bool bar, int epochs, Clock::time_point start)
    : out_(out), bar_(bar), epochs_(epochs), start_(start), epoch_start_(start) {}

std::string TrainProgress::format_span(double seconds) {
  if (!(seconds >= 0)) seconds = 0;
  char buf[48];
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else if (seconds < 3600) {
    const auto s = static_cast<long>(std::lround(seconds));
    std::snprintf(buf, sizeof buf, "%ld min %02ld s", s / 60, s % 60);
  } else {
    const auto m = static_cast<long>(std::lround(seconds / 60));
    std::snprintf(buf, sizeof buf, "%ld h %02ld min", m / 60, m % 60);
  }
  return buf;
}

void TrainProgress::step(int epoch, size_t done, size_t steps, Clock::time_point now) {
  if (!bar_ || steps == 0) return;
  if (drawn_ && done < steps && now - last_draw_ < kRedrawEvery) return;
  last_draw_ = now;
  const double fraction = static_cast<double>(done) / static_cast<double>(steps);
  const size_t filled = static_cast<size_t>(fraction * kBarWidth);
  const double in_epoch = seconds_between(epoch_start_, now);
  const std::string left = done ? format_span(in_epoch / fraction - in_epoch) : "?";
  std::fprintf(out_, "\r\033[Kepoch %d/%d [%s%s] %3.0f%% %zu/%zu steps, %s, about %s left", epoch + 1,
               epochs_, std::string(filled, '=').c_str(), std::string(kBarWidth - filled, ' ').c_str(), 100 * fraction,
               done, steps, format_span(in_epoch).c_str(), left.c_str());
  std::fflush(out_);
  drawn_ = true;
}

void TrainProgress::end_epoch(int epoch, const std::string& results, Clock::time_point now) {
  const double elapsed = seconds_between(start_, now);
  const int done = epoch + 1;
  const std::string estimate =
      done >= epochs_ ? "done" : "about " + format_span(elapsed / done * (epochs_ - done)) + " left";
  std::fprintf(out_, "%sepoch %d/%d: %s | elapsed %s, %s\n", drawn_ ? "\r\033[K" : "", done, epochs_, results.c_str(),
               format_span(elapsed).c_str(), estimate.c_str());
  std::fflush(out_);
  drawn_ = false;
  epoch_start_ = now;
}

}  // namespace braid::examples
