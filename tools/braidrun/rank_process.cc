#include "tools/braidrun/rank_process.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>

namespace braid::braidrun {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::vector<char*> to_c_array(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Everything after fork in the child: async-signal-safe calls only.
[[noreturn]] void run_child(pid_t parent, int out_w, int err_w, int status_w, const char* path, char* const* argv,
                            char* const* envp, const cpu_set_t* cpus) {
  if (cpus != nullptr) sched_setaffinity(0, sizeof(cpu_set_t), cpus);  // best effort: a hint for speed
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);  // braidrun ignores it; an ignored disposition survives exec

  int err = 0;
  if (setpgid(0, 0) != 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) err = errno;
  // braidrun may have died between fork and prctl; then nobody would kill us later.
  if (err == 0 && getppid() != parent) _exit(128 + SIGKILL);
  if (err == 0 && (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0)) err = errno;
  if (err == 0) {
    // Descriptors another braidrun thread opened without O_CLOEXEC (store sockets) must not
    // leak into ranks; the status pipe stays usable until exec closes it.
    syscall(SYS_close_range, 3u, UINT_MAX, CLOSE_RANGE_CLOEXEC);
    execve(path, argv, envp);
    err = errno;
  }
  ssize_t ignored = write(status_w, &err, sizeof err);
  (void)ignored;
  _exit(127);
}

}  // namespace

std::vector<int> cpu_share(const std::vector<int>& available, int local, int nproc) {
  if (nproc < 1 || local < 0 || local >= nproc || available.size() < static_cast<size_t>(nproc)) return {};
  size_t per = available.size() / static_cast<size_t>(nproc);
  auto first = available.begin() + static_cast<std::ptrdiff_t>(per * static_cast<size_t>(local));
  return std::vector<int>(first, first + static_cast<std::ptrdiff_t>(per));
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

Result<std::string> resolve_program(const std::string& program, const char* path_env) {
  if (program.empty()) return invalid_argument("empty program name");
  if (program.find('/') != std::string::npos) {
    if (is_executable_file(program)) return program;
    return invalid_argument("cannot run '" + program + "': " +
                            (::access(program.c_str(), F_OK) == 0 ? "not an executable file" : "no such file"));
  }
  std::string path = path_env && *path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return invalid_argument("cannot find program '" + program + "' in PATH (" + path + ")");
}

Result<SpawnedRank> spawn_rank(const SpawnRequest& request) {
  std::vector<char*> argv = to_c_array(request.argv);
  std::vector<char*> envp = to_c_array(request.env);
  int out[2], err[2], status[2];
  if (pipe2(out, O_CLOEXEC) != 0) return system_error("pipe2", errno);
  if (pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    close(out[0]), close(out[1]);
    return system_error("pipe2", e);
  }
  if (pipe2(status, O_CLOEXEC) != 0) {
    int e = errno;
    close(out[0]), close(out[1]), close(err[0]), close(err[1]);
    return system_error("pipe2", e);
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : request.cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus);
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    run_child(parent, out[1], err[1], status[1], request.path.c_str(), argv.data(), envp.data(),
              request.cpus.empty() ? nullptr : &cpus);
  }
  int fork_errno = errno;
  close(out[1]), close(err[1]), close(status[1]);
  if (pid < 0) {
    close(out[0]), close(err[0]), close(status[0]);
    return system_error("fork", fork_errno);
  }
  // Also set here so a signal to the group cannot race the child's own setpgid; fails
  // harmlessly (EACCES) once the child has exec'd.
  setpgid(pid, pid);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(status[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(status[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int ws;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    close(out[0]), close(err[0]);
    return system_error("cannot start '" + request.path + "'", child_errno);
  }
  return SpawnedRank{pid, out[0], err[0]};
}

}  // namespace braid::braidrun
