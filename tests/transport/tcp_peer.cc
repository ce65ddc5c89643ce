// tests/transport/tcp_peer.cc - a peer process for the multi-process transport tests.
//
// Started with fork+exec (posix_spawn) by tcp_process_test, possibly inside a network namespace.
// Arguments are key=value; what it does is printed one line at a time on stdout:
//   TRANSPORT <name> | EPOLL_PWAIT2 yes|no | ADDR <address> | CONNECTED | WAITING | SHARED_CPU_PEERS <n> | OK |
//   LOST <code> <message> | ERROR <message>
// deny_io_uring=1 installs a seccomp filter first that makes io_uring_setup fail with ENOSYS,
// as container runtimes' default profiles do, so the fallback path runs for real;
// deny_epoll_pwait2=1 does the same to epoll_pwait2, as kernels before 5.11 and valgrind do;
// deny_cma=1 makes process_vm_readv fail with EPERM, as ptrace rules (Yama, a container's
// profile) would, so the shm transport's probe of its peer's memory is refused for real.
// The job's secret comes from BRAID_SECRET / BRAID_SECRET_FILE, as a rank's does. cpu=N pins the
// process to CPU N first, as `taskset -c N` would. After the echo and pingpong scripts it says
// how many of its peers share its only CPU (common/spin.h), while the connection still lives.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/job_secret.h"
#include "common/spin.h"
#include "transport/registry.h"
#include "transport/tcp/epoll_engine.h"

namespace {

using namespace braid;
using namespace braid::transport;
using namespace std::chrono_literals;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Makes the system calls in `calls` fail with its errno for this process and its threads, as a
// container runtime's seccomp profile (io_uring_setup, process_vm_readv) or an old kernel or
// valgrind (epoll_pwait2) would.
bool deny_syscalls(const std::vector<std::pair<uint32_t, int>>& calls) {
#if defined(__x86_64__)
  constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
  return false;
#endif
  std::vector<sock_filter> filter = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
  };
  for (const auto& [nr, err] : calls) {
    filter.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
    filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | static_cast<uint32_t>(err)));
  }
  filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  sock_fprog prog{static_cast<unsigned short>(filter.size()), filter.data()};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

struct Args {
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  long num(const std::string& k, long def) const { return kv.count(k) ? std::stol(kv.at(k)) : def; }
};

// Polls until one completion arrives or 60 s pass.
Result<Completion> next(Transport& t, std::vector<Completion>& queue) {
  auto end = std::chrono::steady_clock::now() + 60s;
  while (queue.empty()) {
    if (std::chrono::steady_clock::now() > end) return timeout_error("no completion within 60 s");
    RETURN_IF_ERROR(t.poll(queue, std::chrono::milliseconds(100)));
  }
  Completion c = queue.front();
  queue.erase(queue.begin());
  return c;
}

int fail(const Status& s) {
  say("ERROR " + s.message());
  return 1;
}

int run(const Args& a) {
  TransportOptions o;
  auto env = Env::parse(process_env());
  if (!env.is_ok()) return fail(env.status());
  o.env = env.value();
  o.env.peer_timeout_s = std::stod(a.get("peer_timeout", "30"));
  o.listen_host = a.get("host", "127.0.0.1");
  auto secret = auth::JobSecret::from_env(o.env);
  if (!secret.is_ok()) return fail(secret.status());
  o.secret = secret.value();
  auto t = create_transport(a.get("transport", "auto"), o);
  if (!t.is_ok()) return fail(t.status());
  Transport& tr = *t.value();
  say(std::string("TRANSPORT ") + tr.name());
  say(std::string("EPOLL_PWAIT2 ") + (tcp::epoll_pwait2_available() ? "yes" : "no"));
  PeerIdentity who{static_cast<uint64_t>(a.num("comm", 7)), static_cast<int>(a.num("rank", 1)),
                   static_cast<int>(a.num("peer", 0))};
  Result<std::unique_ptr<Connection>> conn = Status(ErrorCode::internal, "no role");
  if (a.get("role") == "listen") {
    auto addr = tr.listen();
    if (!addr.is_ok()) return fail(addr.status());
    say("ADDR " + addr.value());
    conn = tr.accept(who, Deadline::after(60s));
  } else {
    conn = tr.connect(a.get("addr"), who, Deadline::after(60s));
  }
  if (!conn.is_ok()) return fail(conn.status());
  say("CONNECTED");
  Connection& c = *conn.value();
  std::vector<Completion> q;
  const size_t bytes = static_cast<size_t>(a.num("bytes", 1 << 20));
  const long count = a.num("count", 10);
  std::vector<char> buf(bytes, 'x'), back(bytes);
  const std::string script = a.get("script", "idle");
  if (script == "idle") {
    std::this_thread::sleep_for(600s);
    return 0;
  }
  if (script == "stream" || script == "sink") {  // forever, until killed
    for (uint64_t i = 0;; ++i) {
      Status s = script == "stream" ? c.post_send(buf.data(), bytes, i) : c.post_recv(buf.data(), bytes, i);
      if (!s.is_ok()) return fail(s);
      auto done = next(tr, q);
      if (!done.is_ok()) return fail(done.status());
      if (!done.value().status.is_ok()) return fail(done.value().status);
    }
  }
  if (script == "wait") {  // one receive that never gets data: how is a lost peer noticed?
    if (!c.post_recv(buf.data(), bytes, 1).is_ok()) return 1;
    say("WAITING");
    auto done = next(tr, q);
    if (!done.is_ok()) return fail(done.status());
    Status s = done.value().status;
    say(std::string("LOST ") + to_string(s.code()) + " " + s.message());
    return 0;
  }
  for (long i = 0; i < count; ++i) {
    if (script == "echo") {  // receive, send it back
      if (!c.post_recv(back.data(), bytes, 0).is_ok()) return 1;
      auto r = next(tr, q);
      if (!r.is_ok() || !r.value().status.is_ok()) return fail(r.is_ok() ? r.value().status : r.status());
      if (!c.post_send(back.data(), r.value().bytes, 1).is_ok()) return 1;
      auto s = next(tr, q);
      if (!s.is_ok() || !s.value().status.is_ok()) return fail(s.is_ok() ? s.value().status : s.status());
    } else if (script == "pingpong") {  // send, expect the same bytes back
      for (size_t j = 0; j < bytes; ++j) buf[j] = static_cast<char>(i * 31 + j * 7);
      if (!c.post_recv(back.data(), bytes, 0).is_ok() || !c.post_send(buf.data(), bytes, 1).is_ok()) return 1;
      for (int k = 0; k < 2; ++k) {
        auto r = next(tr, q);
        if (!r.is_ok() || !r.value().status.is_ok()) return fail(r.is_ok() ? r.value().status : r.status());
      }
      if (back != buf) return fail(internal_error("echo " + std::to_string(i) + " differs"));
    }
  }
  say("SHARED_CPU_PEERS " + std::to_string(cpu_sharing_peers()));
  say("OK");
  std::this_thread::sleep_for(200ms);  // let the last bytes leave before the socket closes
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    size_t eq = s.find('=');
    if (eq != std::string::npos) a.kv[s.substr(0, eq)] = s.substr(eq + 1);
  }
  if (!a.get("cpu").empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(std::stoi(a.get("cpu")), &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      say("ERROR cannot pin to CPU " + a.get("cpu"));
      return 2;
    }
  }
  std::vector<std::pair<uint32_t, int>> denied;
  if (a.get("deny_io_uring") == "1") denied.emplace_back(__NR_io_uring_setup, ENOSYS);
  if (a.get("deny_epoll_pwait2") == "1") denied.emplace_back(__NR_epoll_pwait2, ENOSYS);
  if (a.get("deny_cma") == "1") denied.emplace_back(__NR_process_vm_readv, EPERM);
  if (!denied.empty() && !deny_syscalls(denied)) {
    say("ERROR cannot install the seccomp filter");
    return 2;
  }
  return run(a);
}
