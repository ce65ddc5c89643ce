// Two "hosts" for multi-host tests: network namespaces joined by one veth pair, `v0` in host 0
// at <subnet>.1/24 and `v1` in host 1 at <subnet>.2/24, loopback up in both. Needs root and
// iproute2; when a step fails, error() names it and the test should skip with it. The
// destructor deletes the namespaces it created (and with them both ends of the veth), whatever
// the test's outcome.
#pragma once

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace braid::testing {

class TwoHosts {
 public:
  // Namespaces "<prefix><pid>a" and "<prefix><pid>b": the pid keeps them apart when tests run
  // side by side, and each test file picks its own prefix and subnet ("10.79.4").
  TwoHosts(const std::string& prefix, const std::string& subnet) : subnet_(subnet) {
    const std::string id = std::to_string(getpid());
    ns_ = {prefix + id + "a", prefix + id + "b"};
    for (size_t h = 0; h < 2; ++h) {
      if (sh("ip netns add " + ns_[h]) != 0) {
        error_ = "`ip netns add " + ns_[h] + "` failed (needs root and iproute2)";
        return;
      }
      created_[h] = true;
    }
    for (const std::string& cmd :
         {"ip -n " + ns_[0] + " link add v0 type veth peer name v1 netns " + ns_[1],
          "ip -n " + ns_[0] + " addr add " + address(0) + "/24 dev v0",
          "ip -n " + ns_[1] + " addr add " + address(1) + "/24 dev v1", "ip -n " + ns_[0] + " link set lo up",
          "ip -n " + ns_[1] + " link set lo up", "ip -n " + ns_[0] + " link set v0 up",
          "ip -n " + ns_[1] + " link set v1 up"}) {
      if (sh(cmd) != 0) {
        error_ = "namespace setup failed (needs root and iproute2): " + cmd;
        return;
      }
    }
  }
  ~TwoHosts() {
    for (size_t h = 0; h < 2; ++h) {
      if (created_[h]) sh("ip netns del " + ns_[h]);
    }
  }
  TwoHosts(const TwoHosts&) = delete;
  TwoHosts& operator=(const TwoHosts&) = delete;

  // Empty when both hosts are up.
  const std::string& error() const { return error_; }
  const std::string& ns(int host) const { return ns_[index(host)]; }
  std::string address(int host) const { return subnet_ + (host == 0 ? ".1" : ".2"); }
  // The argv prefix that runs a command inside `host`.
  std::vector<std::string> exec_in(int host) const { return {"ip", "netns", "exec", ns(host)}; }

  // Takes `host`'s end of the veth down: the other host's packets to it are lost from now on.
  bool link_down(int host) const {
    return sh("ip -n " + ns(host) + " link set " + (host == 0 ? "v0" : "v1") + " down") == 0;
  }

  // Bytes `host` has sent onto the link so far (its end of the veth), or -1 when unreadable.
  long long tx_bytes(int host) const {
    const std::string cmd = "ip netns exec " + ns(host) + " cat /sys/class/net/" + (host == 0 ? "v0" : "v1") +
                            "/statistics/tx_bytes 2>/dev/null";
    FILE* f = ::popen(cmd.c_str(), "r");
    if (f == nullptr) return -1;
    long long v = -1;
    if (std::fscanf(f, "%lld", &v) != 1) v = -1;
    ::pclose(f);
    return v;
  }

  // The torchrun variables of rank `rank` of `world`, placed round-robin as launchers number
  // them: host rank % 2, local rank rank / 2, the store on host 0 at `port`.
  std::map<std::string, std::string> round_robin_env(int rank, int world, int port) const {
    return {{"MASTER_ADDR", address(0)},
            {"MASTER_PORT", std::to_string(port)},
            {"RANK", std::to_string(rank)},
            {"WORLD_SIZE", std::to_string(world)},
            {"LOCAL_RANK", std::to_string(rank / 2)},
            {"LOCAL_WORLD_SIZE", std::to_string((world + 1 - rank % 2) / 2)}};
  }

 private:
  static int sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }
  static size_t index(int host) { return host == 0 ? 0 : 1; }

  std::string subnet_;
  std::array<std::string, 2> ns_;
  std::array<bool, 2> created_{false, false};
  std::string error_;
};

}  // namespace braid::testing
