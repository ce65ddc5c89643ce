// tools/braidrun/output_relay.h - one rank's stdout/stderr, relayed line by line.
//
// Each rank writes into two pipes; braidrun reads them and writes every complete line to its
// own stdout/stderr in one write(2), "[rank 3] " in front unless prefixes are off. Only
// braidrun's main thread writes lines, so halves of lines from different ranks never
// interleave. The last lines of each rank are kept for the failure report, and with --log-dir
// every line also goes, unprefixed, to that rank's log file.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace braid::braidrun {

enum class StreamKind { out = 0, err = 1 };

struct RelayTargets {
  int out_fd = 1;  // where the rank's stdout lines go
  int err_fd = 2;  // where its stderr lines go
};

class RankOutput {
 public:
  static constexpr size_t kTailLines = 20;
  // A line longer than this is written in pieces, so one endless line cannot exhaust memory.
  static constexpr size_t kMaxLineBytes = 64 * 1024;

  // Takes ownership of `log_fd` (-1: no log file).
  RankOutput(int rank, bool prefix, RelayTargets targets, int log_fd);
  ~RankOutput();
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;

  // Bytes read from the rank's pipe: every complete line is written out now, a partial one
  // waits for the rest.
  void feed(StreamKind stream, const char* data, size_t n);
  // The pipe reached EOF: a last line without '\n' is written with one added.
  void finish(StreamKind stream);
  // The last lines (both streams, in the order they were written), oldest first.
  std::vector<std::string> tail() const { return {tail_.begin(), tail_.end()}; }

 private:
  void emit(StreamKind stream, const std::string& line);

  std::string prefix_;
  RelayTargets targets_;
  int log_fd_;
  std::string partial_[2];
  std::deque<std::string> tail_;
};

// Writes all of `data` to `fd`, retrying short writes and EINTR; false when the fd is gone
// (EPIPE, EBADF...), which braidrun tolerates: a closed terminal must not stop the job.
bool write_all(int fd, const std::string& data);

// One line of braidrun's own on stderr, "braidrun: " in front.
void say(const std::string& line);

}  // namespace braid::braidrun
