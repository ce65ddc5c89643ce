#include "tests/support/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace braid::testing {

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  char tmpl[] = "/tmp/braid-test-out-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  output_path_ = tmpl;

  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) {
    if (v == "\x01") merged.erase(k);
    else merged[k] = v;
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 1);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  posix_spawn_file_actions_addclose(&actions, fd);
  int rc = posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fd);
  if (rc != 0) throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_), status_(other.status_), reaped_(other.reaped_), output_path_(std::move(other.output_path_)) {
  other.pid_ = -1;
  other.reaped_ = true;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!output_path_.empty()) unlink(output_path_.c_str());
}

int Subprocess::wait(std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (!reaped_) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    if (std::chrono::steady_clock::now() >= end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

void Subprocess::kill(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

std::string Subprocess::output() const {
  std::ifstream in(output_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int usable_cpu(int n) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set) && n-- == 0) return c;
  }
  return -1;
}

namespace {

bool bindable(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  if (fd >= 0) close(fd);
  return ok;
}

}  // namespace

// Ports the kernel hands out to outgoing connections (ip_local_port_range) are avoided: between
// this check and the test's own bind, any connection of a test running beside it could take one
// as its source port (two braidrun nodes given such a port then both fail to serve the store).
// Below that range only another test picking the same random port could.
int free_port() {
  int lo = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo;
  static thread_local unsigned seed = static_cast<unsigned>(getpid()) * 2654435761u ^ static_cast<unsigned>(clock());
  for (int attempt = 0; lo > 12000 && attempt < 200; ++attempt) {
    seed = seed * 1103515245u + 12345u;
    const int port = 10000 + static_cast<int>((seed >> 8) % static_cast<unsigned>(lo - 10000));
    if (bindable(port)) return port;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // no room below the range: any free one
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw std::runtime_error("cannot find a free port");
  }
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string binary_from_env(const char* var) {
  const char* v = std::getenv(var);
  if (!v) throw std::runtime_error(std::string(var) + " is not set: run this test through meson test");
  return v;
}

}  // namespace braid::testing

namespace braid::testing {
std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace braid::testing
