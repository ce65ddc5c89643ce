#include "tools/braidrun/output_relay.h"

#include <errno.h>
#include <unistd.h>

namespace braid::braidrun {

bool write_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

void say(const std::string& line) { write_all(STDERR_FILENO, "braidrun: " + line + "\n"); }

RankOutput::RankOutput(int rank, bool prefix, RelayTargets targets, int log_fd)
    : prefix_(prefix ? "[rank " + std::to_string(rank) + "] " : ""), targets_(targets), log_fd_(log_fd) {}

RankOutput::~RankOutput() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

void RankOutput::feed(StreamKind stream, const char* data, size_t n) {
  std::string& part = partial_[static_cast<int>(stream)];
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') continue;
    part.append(data + start, i - start);
    emit(stream, part);
    part.clear();
    start = i + 1;
  }
  part.append(data + start, n - start);
  while (part.size() >= kMaxLineBytes) {
    emit(stream, part.substr(0, kMaxLineBytes));
    part.erase(0, kMaxLineBytes);
  }
}

void RankOutput::finish(StreamKind stream) {
  std::string& part = partial_[static_cast<int>(stream)];
  if (!part.empty()) emit(stream, part);
  part.clear();
}

void RankOutput::emit(StreamKind stream, const std::string& line) {
  // One write per line: with a pipe or terminal shared with other writers, a line up to
  // PIPE_BUF bytes cannot be split by them.
  write_all(stream == StreamKind::out ? targets_.out_fd : targets_.err_fd, prefix_ + line + "\n");
  if (log_fd_ >= 0) write_all(log_fd_, line + "\n");
  tail_.push_back(line);
  if (tail_.size() > kTailLines) tail_.pop_front();
}

}  // namespace braid::braidrun
