// tests/tools/braidrun/braidrun_runner.h - starting the built braidrun from tests.
//
// meson passes the paths of braidrun and of the rank helper in BRAIDRUN and
// BRAIDRUN_TEST_RANK. braidrun's stdout and stderr go to files, read once it ended.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace braid::braidrun::testing {

inline std::string braidrun_path() {
  const char* p = std::getenv("BRAIDRUN");
  return p ? p : "braidrun";
}

inline std::string rank_helper_path() {
  const char* p = std::getenv("BRAIDRUN_TEST_RANK");
  return p ? p : "braidrun_test_rank";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using braid::testing::TempDir;

struct RunResult {
  int exit_code = -1;  // 128+signal when braidrun was killed; -1 when it had to be killed after the timeout
  std::string out, err;
  bool timed_out = false;
};

class BraidrunProcess {
 public:
  // Starts `prefix` (e.g. {"ip", "netns", "exec", "ns"}) + braidrun + args.
  BraidrunProcess(const std::vector<std::string>& args, const std::vector<std::string>& prefix = {}) {
    out_path_ = dir_.path() + "/stdout";
    err_path_ = dir_.path() + "/stderr";
    std::vector<std::string> all = prefix;
    all.push_back(braidrun_path());
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (posix_spawnp(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~BraidrunProcess() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // braidrun's stdout so far (it is still running).
  std::string out_so_far() const { return read_file(out_path_); }
  std::string err_so_far() const { return read_file(err_path_); }

  // Waits up to `timeout_s`; then kills braidrun and reports timed_out.
  RunResult wait(double timeout_s = 60) {
    RunResult r;
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int ws = 0;
    while (pid_ > 0) {
      pid_t got = waitpid(pid_, &ws, WNOHANG);
      if (got == pid_) break;
      if (std::chrono::steady_clock::now() > until) {
        r.timed_out = true;
        kill(pid_, SIGKILL);
        waitpid(pid_, &ws, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    reaped_ = true;
    if (!r.timed_out && pid_ > 0) r.exit_code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    r.out = read_file(out_path_);
    r.err = read_file(err_path_);
    return r;
  }

 private:
  TempDir dir_;
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

inline RunResult run_braidrun(const std::vector<std::string>& args, double timeout_s = 60) {
  return BraidrunProcess(args).wait(timeout_s);
}

using ::braid::testing::free_port;  // tests/support/subprocess.h

// Alive = listed in /proc and not a zombie.
inline bool pid_alive(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  auto close_paren = stat.rfind(')');
  return close_paren == std::string::npos || close_paren + 2 >= stat.size() || stat[close_paren + 2] != 'Z';
}

// Waits up to `timeout_s` for every pid to be gone; returns those still alive.
inline std::vector<pid_t> wait_pids_gone(const std::vector<pid_t>& pids, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<pid_t> alive;
  do {
    alive.clear();
    for (pid_t p : pids) {
      if (pid_alive(p)) alive.push_back(p);
    }
    if (alive.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < until);
  return alive;
}

// Reads DIR/rank<i>.pid for i in [0, n), waiting up to `timeout_s` for them to appear.
inline std::vector<pid_t> read_pidfiles(const std::string& dir, int n, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    std::string path = dir + "/rank" + std::to_string(i) + ".pid";
    std::string s;
    while ((s = read_file(path)).find('\n') == std::string::npos && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!s.empty()) pids.push_back(static_cast<pid_t>(std::atoi(s.c_str())));
  }
  return pids;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace braid::braidrun::testing
