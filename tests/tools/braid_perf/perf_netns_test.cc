// braid-perf across two "hosts": two network namespaces joined by a veth pair, one braidrun in
// each (--nnodes 2), every result checked (-c 1). Needs root for `ip netns`; skipped otherwise.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/two_hosts.h"

namespace braid {
namespace {

using testing::Subprocess;
using testing::TwoHosts;

std::vector<std::string> node(const std::string& ns, const std::string& op, int per_node) {
  return {"ip", "netns", "exec", ns, testing::binary_from_env("BRAIDRUN"), "--nnodes", "2", "--nproc-per-node",
          std::to_string(per_node), "--rdzv-endpoint", "10.78.0.1:29611", "--rdzv-timeout-s", "30",
          testing::binary_from_env("BRAID_PERF"), "--op", op, "-b", "1K", "-e", "4M", "-f", "16", "-n", "3", "-w",
          "1", "-c", "1"};
}

TEST(PerfNetns, CollectivesAcrossTwoHostsAreExact) {
  TwoHosts hosts("bpf", "10.78.0");
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  for (const char* op : {"all_reduce", "all_gather", "broadcast", "all_to_all"}) {
    Subprocess a(node(hosts.ns(0), op, 2), {{"BRAID_TIMEOUT_S", "60"}, {"BRAID_DEBUG", "INFO"}});
    Subprocess b(node(hosts.ns(1), op, 2), {{"BRAID_TIMEOUT_S", "60"}, {"BRAID_DEBUG", "INFO"}});
    int ra = a.wait(std::chrono::seconds(120));
    int rb = b.wait(std::chrono::seconds(120));
    EXPECT_EQ(ra, 0) << op << "\n" << a.output();
    EXPECT_EQ(rb, 0) << op << "\n" << b.output();
    EXPECT_NE(a.output().find("Out of bounds values : 0 OK"), std::string::npos) << a.output();
    EXPECT_NE(a.output().find("4 ranks"), std::string::npos) << a.output();
    // Addresses on the veth link are not host-local: rings keep 2 MiB per hop moving, eight
    // segments of 256 KiB (a 4 MiB all_reduce has four segments per share, so its columns all
    // run interleaved, as one group).
    EXPECT_NE(b.output().find("ring depth 8 (links leave the host: 8 segments of 256 KiB in flight per hop)"),
              std::string::npos)
        << b.output();
  }
}

}  // namespace
}  // namespace braid
