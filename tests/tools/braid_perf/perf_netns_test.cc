// braid-perf across two "hosts": two network namespaces joined by a veth pair, one braidrun in
// each (--nnodes 2), every result checked (-c 1). Needs root for `ip netns`; skipped otherwise.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace braid {
namespace {

using testing::Subprocess;

int sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

class TwoHosts {
 public:
  TwoHosts() {
    std::string id = std::to_string(getpid());
    a_ = "bpf" + id + "a";
    b_ = "bpf" + id + "b";
    for (const std::string& cmd :
         {"ip netns add " + a_, "ip netns add " + b_, "ip -n " + a_ + " link add v0 type veth peer name v1 netns " + b_,
          "ip -n " + a_ + " addr add 10.78.0.1/24 dev v0", "ip -n " + b_ + " addr add 10.78.0.2/24 dev v1",
          "ip -n " + a_ + " link set lo up", "ip -n " + b_ + " link set lo up", "ip -n " + a_ + " link set v0 up",
          "ip -n " + b_ + " link set v1 up"}) {
      if (sh(cmd) != 0) {
        error_ = "namespace setup failed (needs root and iproute2): " + cmd;
        return;
      }
    }
  }
  ~TwoHosts() {
    sh("ip netns del " + a_);
    sh("ip netns del " + b_);
  }
  const std::string& error() const { return error_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  std::string a_, b_, error_;
};

std::vector<std::string> node(const std::string& ns, const std::string& op, int per_node) {
  return {"ip", "netns", "exec", ns, testing::binary_from_env("BRAIDRUN"), "--nnodes", "2", "--nproc-per-node",
          std::to_string(per_node), "--rdzv-endpoint", "10.78.0.1:29611", "--rdzv-timeout-s", "30",
          testing::binary_from_env("BRAID_PERF"), "--op", op, "-b", "1K", "-e", "4M", "-f", "16", "-n", "3", "-w",
          "1", "-c", "1"};
}

TEST(PerfNetns, CollectivesAcrossTwoHostsAreExact) {
  TwoHosts hosts;
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  for (const char* op : {"all_reduce", "all_gather", "broadcast", "all_to_all"}) {
    Subprocess a(node(hosts.a(), op, 2), {{"BRAID_TIMEOUT_S", "60"}, {"BRAID_DEBUG", "INFO"}});
    Subprocess b(node(hosts.b(), op, 2), {{"BRAID_TIMEOUT_S", "60"}, {"BRAID_DEBUG", "INFO"}});
    int ra = a.wait(std::chrono::seconds(120));
    int rb = b.wait(std::chrono::seconds(120));
    EXPECT_EQ(ra, 0) << op << "\n" << a.output();
    EXPECT_EQ(rb, 0) << op << "\n" << b.output();
    EXPECT_NE(a.output().find("Out of bounds values : 0 OK"), std::string::npos) << a.output();
    EXPECT_NE(a.output().find("4 ranks"), std::string::npos) << a.output();
    // Addresses on the veth link are not host-local: rings keep two segments moving per hop
    // (and a 4 MiB all_reduce has four segments per share, so the grouped order really runs).
    EXPECT_NE(b.output().find("ring depth 2 (links leave the host)"), std::string::npos) << b.output();
  }
}

}  // namespace
}  // namespace braid
