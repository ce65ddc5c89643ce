// tests/support/subprocess.h - start rank processes for multi-process tests.
//
// Processes are started with posix_spawn (never a bare fork of a test that runs threads), with
// their stdout and stderr captured into a file, and waited for with a bound.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace braid::testing {

class Subprocess {
 public:
  // Starts argv[0] with the test's environment plus `env` (a value of "\x01" removes the variable).
  Subprocess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});
  ~Subprocess();  // kills (SIGKILL) and reaps a process still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  Subprocess(Subprocess&& other) noexcept;

  pid_t pid() const { return pid_; }
  // Waits up to `timeout`; returns the exit code, 128+signal when killed, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout);
  void kill(int sig);
  // Everything the process wrote to stdout and stderr so far.
  std::string output() const;

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  bool reaped_ = false;
  std::string output_path_;
};

// A TCP port on 127.0.0.1 that was free a moment ago, chosen below the kernel's range for
// outgoing connections when there is room (see subprocess.cc).
int free_port();
// The n-th CPU this process may use (CPU 0 may be outside a container's cpuset); -1 if none.
int usable_cpu(int n);
// Path of a built helper binary, from the environment variable `var` set by meson.
std::string binary_from_env(const char* var);

}  // namespace braid::testing

namespace braid::testing {
// The whole content of a file ("" when it cannot be read).
std::string read_file(const std::string& path);
}  // namespace braid::testing
