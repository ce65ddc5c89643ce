// tools/braidrun/rank_process.h - starting one rank: fork + exec with its pipes.
//
// braidrun may run the store server's thread while it forks, so the child does only
// async-signal-safe calls between fork and exec: argv and envp are built before the fork. The
// child leads its own process group (so braidrun can signal the rank and whatever it started),
// asks for SIGKILL when braidrun dies (PR_SET_PDEATHSIG; then checks that braidrun did not
// die before that call), unblocks every signal braidrun blocked for its signalfd, and restores
// SIGPIPE's default.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace braid::braidrun {

struct SpawnRequest {
  std::string path;               // resolved executable path (resolve_program)
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "NAME=value"
  std::vector<int> cpus;          // CPUs the rank is bound to; empty: not bound
};

// The CPUs of `available` that local rank `local` of `nproc` gets: an equal contiguous share
// when there are at least as many CPUs as ranks, else none (oversubscribed: binding would only
// pin ranks onto each other).
std::vector<int> cpu_share(const std::vector<int>& available, int local, int nproc);
// The CPUs this process may run on.
std::vector<int> allowed_cpus();

struct SpawnedRank {
  pid_t pid = -1;  // also the process group id
  int out_fd = -1;  // read ends of the rank's stdout and stderr pipes, close-on-exec; caller closes
  int err_fd = -1;
};

// Finds `program` the way execvp would (a name with '/' is taken as a path), before any fork.
Result<std::string> resolve_program(const std::string& program, const char* path_env);

// Starts the rank. Returns once the child has exec'd; an exec failure (no such file, not
// executable) is an error naming the program, and the child is reaped.
Result<SpawnedRank> spawn_rank(const SpawnRequest& request);

}  // namespace braid::braidrun
