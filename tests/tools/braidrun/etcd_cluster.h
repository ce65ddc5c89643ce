// tests/tools/braidrun/etcd_cluster.h - a real 3-member etcd cluster for one test, on 127.0.0.1
// or in network namespaces.
//
// Debian's etcd-server (scripts/setup.sh installs it); tests skip with the reason when the etcd
// binary is missing. Each member gets its own client and peer port and data directory; the
// cluster is up once every member answers a read (which needs an elected leader). Members
// can be killed (SIGKILL) or frozen (SIGSTOP) one at a time; the destructor kills what is left.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tools/braidrun/etcd_http.h"

namespace braid::braidrun::testing {

// The etcd binary: $ETCD, else the first etcd on PATH; empty when there is none.
inline std::string etcd_binary() {
  if (const char* e = std::getenv("ETCD"); e && access(e, X_OK) == 0) return e;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t from = 0;;) {
    size_t colon = dirs.find(':', from);
    std::string candidate = dirs.substr(from, colon == std::string::npos ? std::string::npos : colon - from) + "/etcd";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string::npos) return "";
    from = colon + 1;
  }
}

#define BRAID_SKIP_WITHOUT_ETCD()                                                                             \
  do {                                                                                                        \
    if (::braid::braidrun::testing::etcd_binary().empty())                                                    \
      GTEST_SKIP() << "etcd is not installed (Debian's etcd-server; scripts/setup.sh installs it)";           \
  } while (0)

// Where one member runs: in network namespace `netns` (empty: this one) at address `host`.
struct EtcdPlace {
  std::string netns;
  std::string host = "127.0.0.1";
};

class EtcdCluster {
 public:
  static constexpr int kMembers = 3;

  // Starts the members and waits (up to `timeout_s`) until each answers. On failure, error()
  // says why and the members' output; the test should fail with it. On 127.0.0.1 the ports
  // come from free_port(), so a start that lost a port to another process is tried again; in
  // namespaces (`places`, one per member) member i listens on 2379 + 10 i (peers 2380 + 10 i).
  explicit EtcdCluster(double timeout_s = 30, std::vector<EtcdPlace> places = {}) : places_(std::move(places)) {
    if (places_.empty()) places_.resize(kMembers);
    for (int attempt = 0; attempt < 3 && !up_; ++attempt) start(timeout_s);
  }

  bool up() const { return up_; }
  const std::string& error() const { return error_; }
  // "127.0.0.1:c0,127.0.0.1:c1,127.0.0.1:c2", as --rdzv-endpoint takes it.
  std::string endpoints() const {
    std::string s;
    for (int i = 0; i < kMembers; ++i) s += (s.empty() ? "" : ",") + endpoint(i);
    return s;
  }
  std::string endpoint(int member) const {
    return places_.at(static_cast<size_t>(member)).host + ":" + std::to_string(client_ports_.at(static_cast<size_t>(member)));
  }
  // Member `i`'s peer (raft) address: what a user might give by mistake for its client one.
  std::string peer_endpoint(int member) const {
    return places_.at(static_cast<size_t>(member)).host + ":" + std::to_string(peer_ports_.at(static_cast<size_t>(member)));
  }
  // Kills member `i` (SIGKILL) and waits for it to be gone.
  void kill_member(int i) {
    members_.at(static_cast<size_t>(i))->kill(SIGKILL);
    members_.at(static_cast<size_t>(i))->wait(std::chrono::seconds(10));
  }
  // Sends `sig` to member `i` (SIGSTOP freezes it: it accepts connections and answers nothing).
  void signal_member(int i, int sig) { members_.at(static_cast<size_t>(i))->kill(sig); }
  std::string output(int i) const { return members_.at(static_cast<size_t>(i))->output(); }

 private:
  // One read from member `i`, from inside its namespace when it has one (a thread of its own
  // enters it: network namespaces are per thread).
  Result<etcd::HttpReply> ask_member(int i) const {
    const EtcdPlace& place = places_.at(static_cast<size_t>(i));
    auto read = [&] {
      return etcd::http_post(etcd::Endpoint{place.host, static_cast<uint16_t>(client_ports_.at(static_cast<size_t>(i)))},
                             "/v3/kv/range", "{\"key\":\"AA==\"}", Deadline::after(std::chrono::seconds(1)));
    };
    if (place.netns.empty()) return read();
    Result<etcd::HttpReply> out = Status(ErrorCode::internal, "cannot enter network namespace " + place.netns);
    std::thread([&] {
      int fd = open(("/var/run/netns/" + place.netns).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0 && setns(fd, CLONE_NEWNET) == 0) out = read();
      if (fd >= 0) close(fd);
    }).join();
    return out;
  }

  void start(double timeout_s) {
    members_.clear();
    client_ports_.clear();
    dir_ = std::make_unique<::braid::testing::TempDir>("braid-etcd");
    std::vector<int>& peer_ports = peer_ports_;
    peer_ports.clear();
    for (int i = 0; i < kMembers; ++i) {
      const bool netns = !places_[static_cast<size_t>(i)].netns.empty();
      client_ports_.push_back(netns ? 2379 + 10 * i : ::braid::testing::free_port());
      peer_ports.push_back(netns ? 2380 + 10 * i : ::braid::testing::free_port());
    }
    auto url = [&](int i, int port) { return "http://" + places_[static_cast<size_t>(i)].host + ":" + std::to_string(port); };
    std::string initial;
    for (int i = 0; i < kMembers; ++i) {
      initial += (i ? "," : "") + std::string("m") + std::to_string(i) + "=" + url(i, peer_ports[i]);
    }
    const std::string token = "braid-test-" + std::to_string(getpid()) + "-" + std::to_string(client_ports_[0]);
    for (int i = 0; i < kMembers; ++i) {
      const std::string client = url(i, client_ports_[i]);
      const std::string peer = url(i, peer_ports[i]);
      std::vector<std::string> argv;
      const std::string& netns = places_[static_cast<size_t>(i)].netns;
      if (!netns.empty()) argv = {"ip", "netns", "exec", netns};
      members_.push_back(std::make_unique<::braid::testing::Subprocess>(plus_args(argv, std::vector<std::string>{
          etcd_binary(), "--name", "m" + std::to_string(i), "--data-dir", dir_->path() + "/m" + std::to_string(i),
          "--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
          "--initial-advertise-peer-urls", peer, "--initial-cluster", initial, "--initial-cluster-state", "new",
          "--initial-cluster-token", token, "--logger", "zap", "--log-level", "warn",
          // A loaded test machine must not make members think the leader died: elections then
          // come only from the tests' kills.
          "--heartbeat-interval", "200", "--election-timeout", "2000"})));
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    std::vector<bool> ready(kMembers, false);
    std::string last;
    while (std::chrono::steady_clock::now() < until) {
      int n = 0;
      for (int i = 0; i < kMembers; ++i) {
        if (!ready[i]) {
          auto r = ask_member(i);
          ready[i] = r.is_ok() && r->status == 200;
          if (!r.is_ok()) last = r.status().message();
          else if (!ready[i]) last = "HTTP " + std::to_string(r->status) + ": " + r->body;
        }
        n += ready[i] ? 1 : 0;
      }
      if (n == kMembers) {
        up_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    error_ = "the etcd cluster did not come up within " + std::to_string(timeout_s) + " s (" + last + ")";
    for (int i = 0; i < kMembers; ++i) error_ += "\n--- member " + std::to_string(i) + ":\n" + output(i);
  }

  static std::vector<std::string> plus_args(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  std::vector<EtcdPlace> places_;
  std::unique_ptr<::braid::testing::TempDir> dir_;
  std::vector<std::unique_ptr<::braid::testing::Subprocess>> members_;
  std::vector<int> client_ports_, peer_ports_;
  bool up_ = false;
  std::string error_;
};

}  // namespace braid::braidrun::testing
