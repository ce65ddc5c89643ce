// Two "hosts" (network namespaces joined by a veth pair) with two ranks each, placed
// round-robin (ranks 0 and 2 on host A, 1 and 3 on host B) and started directly, without
// braidrun: every collective checked by braid-perf (-c 1), the ring ordered by host and each
// peer's transport shown at BRAID_DEBUG=INFO. Needs root for `ip netns`; skipped otherwise.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/two_hosts.h"

namespace braid {
namespace {

using testing::Subprocess;
using testing::TwoHosts;

// Rank r of 4 on host r % 2, running braid-perf for `op` over sizes 1 KiB .. 1 MiB, checked.
std::unique_ptr<Subprocess> start_rank(const TwoHosts& hosts, int r, const std::string& op, int port) {
  std::vector<std::string> argv = {"ip", "netns", "exec", hosts.ns(r % 2), testing::binary_from_env("BRAID_PERF"),
                                   "--op", op, "-b", "1K", "-e", "1M", "-f", "32", "-n", "1", "-w", "0", "-c", "1"};
  std::map<std::string, std::string> env = hosts.round_robin_env(r, 4, port);
  env.insert({{"BRAID_TIMEOUT_S", "60"}, {"BRAID_RENDEZVOUS_TIMEOUT_S", "60"}, {"BRAID_DEBUG", "INFO"}});
  return std::make_unique<Subprocess>(argv, env);
}

TEST(PerfMixedHosts, EveryCollectiveIsExactWithTheRingOrderedByHost) {
  TwoHosts hosts("bmx", "10.79.0");
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  int port = 29700;
  for (const char* op : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "gather", "scatter",
                         "all_to_all", "barrier", "sendrecv"}) {
    SCOPED_TRACE(op);
    std::vector<std::unique_ptr<Subprocess>> ranks;
    ++port;  // a fresh store port per job: the last one's may linger in TIME_WAIT
    for (int r = 0; r < 4; ++r) ranks.push_back(start_rank(hosts, r, op, port));
    for (int r = 0; r < 4; ++r) {
      const int rc = ranks[static_cast<size_t>(r)]->wait(std::chrono::seconds(120));
      EXPECT_EQ(rc, 0) << "rank " << r << "\n" << ranks[static_cast<size_t>(r)]->output();
    }
    const std::string out0 = ranks[0]->output();
    EXPECT_NE(out0.find("Out of bounds values : 0 OK"), std::string::npos) << out0;
    // Placed round-robin, the ring puts each host's ranks side by side: one crossing each way.
    for (int r = 0; r < 4; ++r) {
      const std::string out = ranks[static_cast<size_t>(r)]->output();
      EXPECT_NE(out.find("ring 0 2 | 1 3 (ordered by host)"), std::string::npos) << "rank " << r << "\n" << out;
      EXPECT_NE(out.find("ring depth 8 (links leave the host"), std::string::npos) << "rank " << r << "\n" << out;
    }
    // Each peer's transport: the other host's ranks over tcp; the same host's over shm where
    // this build has it, else over tcp too.
    const bool shm = out0.find("goes on without shm") == std::string::npos;
    if (shm) {
      EXPECT_NE(out0.find("to peers 1,3"), std::string::npos) << out0;
      EXPECT_NE(out0.find("to peers 2"), std::string::npos) << out0;
    } else {
      EXPECT_NE(out0.find("to peers 1,2,3"), std::string::npos) << out0;
    }
  }
}

}  // namespace
}  // namespace braid
