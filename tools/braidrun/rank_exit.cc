#include "tools/braidrun/rank_exit.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

namespace braid::braidrun {

std::string signal_name(int sig) {
  // sigabbrev_np (glibc 2.32+) is thread-safe and gives "SEGV" without the "SIG".
  if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return "exit code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    std::string s = "killed by " + signal_name(sig) + " (signal " + std::to_string(sig) + ")";
    if (WCOREDUMP(wait_status)) s += ", core dumped";
    return s;
  }
  return "unknown wait status " + std::to_string(wait_status);
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace braid::braidrun
