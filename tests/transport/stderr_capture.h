// tests/transport/stderr_capture.h - what this process writes to stderr (braid's log) while a
// StderrCapture lives, for tests of what is logged.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace braid::transport::testing {

class StderrCapture {
 public:
  StderrCapture() {
    char path[] = "/tmp/braid_stderr_XXXXXX";
    file_ = mkstemp(path);
    ::unlink(path);
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    ::dup2(file_, STDERR_FILENO);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    ::close(file_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  // Everything written so far.
  std::string text() const {
    std::fflush(stderr);
    std::string out;
    char buf[4096];
    for (off_t at = 0;;) {
      ssize_t n = ::pread(file_, buf, sizeof buf, at);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      at += n;
    }
    return out;
  }

 private:
  int file_ = -1;
  int saved_ = -1;
};

}  // namespace braid::transport::testing
