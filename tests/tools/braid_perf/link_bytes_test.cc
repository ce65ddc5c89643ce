// The bytes a 4-rank all_reduce puts on the link between two hosts, counted by the kernel.
//
// Two network namespaces ("hosts") joined by one veth pair; ranks placed round-robin (0 and 2
// on host A, 1 and 3 on host B) as launchers number them, BRAID_TRANSPORT=auto (shm inside a
// host, tcp across). A ring all_reduce of S bytes on n ranks sends 2(n-1)/n * S from every rank
// to the next one. Ordered by host (0 2 | 1 3) only the hops 2->1 and 3->0 leave a host, so
// each direction of the link carries 2(n-1)/n * S per operation; numbered as placed (0 1 2 3)
// every hop crosses and each direction carries twice that. The veth's tx_bytes (payload plus
// one set of headers per GSO packet, ACKs, the store's and the handshakes' traffic) must lie
// between the ring's payload and that payload plus a bounded overhead, and the same job with
// BRAID_RING_ORDER=rank must exceed the bound: the check tells one crossing per step from two.
// Needs root for `ip netns`; skipped otherwise.
#include <gtest/gtest.h>

#include <cstdio>
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

constexpr size_t kBytes = size_t{4} << 20;  // per all_reduce
// braid-perf -w 1 -n 2 -c 1 runs 1 + 2 + 1 operations of kBytes, out of place and in place.
constexpr size_t kOps = 2 * (1 + 2 + 1);
// What crosses besides the ring's payload, as a share of it (TCP/IP and Ethernet headers, ACKs)
// and as a fixed amount (store, handshakes, barriers, the small all_reduces braid-perf uses to
// combine timings and compare checks, IPv6 neighbour discovery).
constexpr double kHeaderShare = 0.02;
constexpr size_t kFixedBytes = size_t{512} << 10;

struct Crossed {
  long long a_to_b = 0;
  long long b_to_a = 0;
  std::string rank0_output;
};

// One checked braid-perf all_reduce job on 4 ranks, rank r on host r % 2; what crossed the link.
Crossed run_job(const TwoHosts& hosts, int port, const std::string& ring_order) {
  Crossed out;
  const long long a0 = hosts.tx_bytes(0), b0 = hosts.tx_bytes(1);
  std::vector<std::unique_ptr<Subprocess>> ranks;
  const std::string size = std::to_string(kBytes);
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> argv = {"ip", "netns", "exec", hosts.ns(r % 2), testing::binary_from_env("BRAID_PERF"),
                                     "--op", "all_reduce", "--algo", "ring", "-b", size, "-e", size,
                                     "-n", "2", "-w", "1", "-c", "1"};
    std::map<std::string, std::string> env = hosts.round_robin_env(r, 4, port);
    env.insert({{"BRAID_TRANSPORT", "auto"},
                {"BRAID_RING_ORDER", ring_order},
                {"BRAID_TIMEOUT_S", "60"},
                {"BRAID_RENDEZVOUS_TIMEOUT_S", "60"},
                {"BRAID_DEBUG", "INFO"}});
    ranks.push_back(std::make_unique<Subprocess>(argv, env));
  }
  for (int r = 0; r < 4; ++r) {
    Subprocess& p = *ranks[static_cast<size_t>(r)];
    const int rc = p.wait(std::chrono::seconds(120));
    EXPECT_EQ(rc, 0) << "BRAID_RING_ORDER=" << ring_order << " rank " << r << "\n" << p.output();
  }
  out.rank0_output = ranks[0]->output();
  EXPECT_NE(out.rank0_output.find("Out of bounds values : 0 OK"), std::string::npos) << out.rank0_output;
  const long long a1 = hosts.tx_bytes(0), b1 = hosts.tx_bytes(1);
  EXPECT_TRUE(a0 >= 0 && b0 >= 0 && a1 >= 0 && b1 >= 0) << "could not read the veth's tx_bytes";
  out.a_to_b = a1 - a0;
  out.b_to_a = b1 - b0;
  return out;
}

TEST(LinkBytes, OrderedRingCrossesTheLinkOncePerHostPerStep) {
  TwoHosts hosts("blb", "10.79.4");
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  // Each direction's share of the ring: the one hop that leaves the host, 2(n-1)/n of S per op.
  const double payload = 2.0 * 3 / 4 * static_cast<double>(kBytes) * kOps;
  const double bound = payload * (1 + kHeaderShare) + kFixedBytes;

  const Crossed host = run_job(hosts, 29711, "host");
  EXPECT_NE(host.rank0_output.find("ring 0 2 | 1 3 (ordered by host)"), std::string::npos) << host.rank0_output;
  std::printf("ordered by host: A->B %lld, B->A %lld bytes; ring payload %.0f, bound %.0f\n", host.a_to_b,
              host.b_to_a, payload, bound);
  for (long long crossed : {host.a_to_b, host.b_to_a}) {
    EXPECT_GE(static_cast<double>(crossed), payload) << "less than the ring's payload crossed: not what was counted?";
    EXPECT_LE(static_cast<double>(crossed), bound) << "more than one crossing per host per step";
  }

  // The control: the same job in rank order crosses at every hop, and the bound catches it.
  const Crossed rank = run_job(hosts, 29712, "rank");
  EXPECT_NE(rank.rank0_output.find("ring 0 | 1 | 2 | 3"), std::string::npos) << rank.rank0_output;
  std::printf("rank order: A->B %lld, B->A %lld bytes\n", rank.a_to_b, rank.b_to_a);
  for (long long crossed : {rank.a_to_b, rank.b_to_a}) {
    EXPECT_GT(static_cast<double>(crossed), bound) << "a ring crossing at every hop stayed within the bound";
    EXPECT_GE(static_cast<double>(crossed), 2 * payload);
  }
}

}  // namespace
}  // namespace braid
