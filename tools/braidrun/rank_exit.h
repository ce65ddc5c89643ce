// tools/braidrun/rank_exit.h - how a rank ended, in words and as braidrun's exit code.
#pragma once

#include <string>

namespace braid::braidrun {

// "exit code 3", "killed by SIGSEGV (signal 11)"; `wait_status` as waitpid returns it.
std::string describe_wait_status(int wait_status);
// The shell's convention: the exit code, or 128 + the signal that killed the process.
int exit_code_of(int wait_status);
// "SIGTERM" for 15, "signal 64" for anything unnamed.
std::string signal_name(int sig);

}  // namespace braid::braidrun
