#include "tools/braidrun/rank_env.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <utility>

extern char** environ;

namespace braid::braidrun {

std::vector<std::string> build_rank_env(const std::vector<std::string>& base, const RankIdentity& id) {
  const std::pair<const char*, std::string> vars[] = {
      {"RANK", std::to_string(id.rank)},
      {"LOCAL_RANK", std::to_string(id.local_rank)},
      {"WORLD_SIZE", std::to_string(id.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(id.local_world_size)},
      {"GROUP_RANK", std::to_string(id.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(id.nnodes)},
      // One role ("default"), so role ranks are the global ones, as torchrun's single role.
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", std::to_string(id.rank)},
      {"ROLE_WORLD_SIZE", std::to_string(id.world_size)},
      {"MASTER_ADDR", id.master_addr},
      {"MASTER_PORT", std::to_string(id.master_port)},
      {"TORCHELASTIC_RUN_ID", id.run_id},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(id.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(id.max_restarts)},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"BRAID_AGENT_STORE", "1"},
      {"BRAID_STORE_PORT", std::to_string(id.store_port)},
  };
  std::vector<std::pair<std::string, std::string>> set;
  for (const auto& [name, value] : vars) set.emplace_back(name, value);
  if (!id.job_id.empty()) set.emplace_back("BRAID_JOB_ID", id.job_id);
  std::vector<std::string> dropped;
  if (!id.secret_file.empty()) {
    set.emplace_back("BRAID_SECRET_FILE", id.secret_file);
    dropped.push_back("BRAID_SECRET=");  // Env refuses both at once
  }
  for (const auto& [name, value] : set) dropped.push_back(name + "=");
  std::vector<std::string> out;
  out.reserve(base.size() + set.size());
  for (const std::string& kv : base) {
    bool overridden = false;
    for (const std::string& key : dropped) overridden = overridden || kv.compare(0, key.size(), key) == 0;
    if (!overridden) out.push_back(kv);
  }
  for (const auto& [name, value] : set) out.push_back(name + "=" + value);
  return out;
}

namespace {

// The inode of this process's pid namespace: a pid names a process only inside it. 0 when /proc
// does not say (then nothing is swept: a pid's liveness could not be judged).
uint64_t pid_namespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

// Removes what braidruns that were killed (SIGKILL runs no destructor) left in `tmp`: the
// directories "braidrun-secret-<pidns>-<pid>-*" of this user and pid namespace whose braidrun is
// gone. A directory of a live braidrun, another user's, another namespace's or one that is not a
// plain directory is left alone; a failure to remove one is not braidrun's concern.
void sweep_secrets_of_killed_braidruns(const std::string& tmp, uint64_t pidns) {
  if (pidns == 0) return;
  DIR* d = ::opendir(tmp.c_str());
  if (d == nullptr) return;
  const std::string prefix = "braidrun-secret-" + std::to_string(pidns) + "-";
  while (const dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (!name.starts_with(prefix)) continue;
    std::string_view rest = name.substr(prefix.size());
    pid_t pid = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (ec != std::errc() || end == rest.data() || *end != '-' || pid <= 0) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    const std::string dir = tmp + "/" + std::string(name);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    ::unlink((dir + "/secret").c_str());
    ::rmdir(dir.c_str());
  }
  ::closedir(d);
}

}  // namespace

Result<std::unique_ptr<SecretFile>> SecretFile::create(const std::string& secret) {
  const char* tmp_env = std::getenv("TMPDIR");
  const std::string tmp = tmp_env && *tmp_env ? tmp_env : "/tmp";
  const uint64_t pidns = pid_namespace();
  sweep_secrets_of_killed_braidruns(tmp, pidns);
  // The name says whose directory it is (pid namespace and braidrun's pid), so that a later
  // braidrun can tell a killed braidrun's leftover from a running job's.
  std::string templ =
      tmp + "/braidrun-secret-" + std::to_string(pidns) + "-" + std::to_string(::getpid()) + "-XXXXXX";
  // mkdtemp makes the directory with mode 0700: nobody else can even look up the file's name.
  if (mkdtemp(templ.data()) == nullptr) {
    return system_error("braidrun: cannot make a private directory for the job's secret (" + templ + ")", errno);
  }
  std::unique_ptr<SecretFile> f(new SecretFile());
  f->dir_ = templ;
  std::string path = templ + "/secret";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return system_error("braidrun: cannot create " + path, errno);
  f->path_ = path;  // from here on the destructor removes it
  size_t off = 0;
  while (off < secret.size()) {
    ssize_t w = ::write(fd, secret.data() + off, secret.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      return system_error("braidrun: cannot write " + path, err);
    }
    off += static_cast<size_t>(w);
  }
  ::close(fd);
  return f;
}

SecretFile::~SecretFile() {
  if (!path_.empty()) ::unlink(path_.c_str());
  if (!dir_.empty()) ::rmdir(dir_.c_str());
}

std::vector<std::string> current_environ() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

}  // namespace braid::braidrun
