// The ring order as a pure function, and what it buys: one network crossing per host per step.
#include "collectives/ring_order.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "collectives/algorithms.h"
#include "tests/collectives/schedule_simulator.h"

namespace braid::collectives {
namespace {

TEST(RingOrder, GroupsRanksOfOneHostInOrderOfTheirLowestRank) {
  // Round-robin placement over two hosts.
  EXPECT_EQ(ring_order({"a", "b", "a", "b"}), (std::vector<int>{0, 2, 1, 3}));
  // Mixed: three hosts of uneven sizes, interleaved.
  EXPECT_EQ(ring_order({"x", "y", "y", "z", "x", "z", "y"}), (std::vector<int>{0, 4, 1, 2, 6, 3, 5}));
  // The host of rank 0 need not come first by name: hosts keep the order of their lowest rank.
  EXPECT_EQ(ring_order({"b", "a", "b", "a"}), (std::vector<int>{0, 2, 1, 3}));
}

TEST(RingOrder, KeepsRankOrderWhereItIsAlreadyGrouped) {
  for (const auto& hosts : std::vector<std::vector<std::string>>{
           {"a", "a", "b", "b"},       // already contiguous
           {"h", "h", "h", "h", "h"},  // a single host
           {"a", "b", "c", "d"},       // one rank per host
           {"only"},
           {}}) {
    const std::vector<int> order = ring_order(hosts);
    EXPECT_EQ(order.size(), hosts.size());
    EXPECT_TRUE(is_identity(order)) << describe_ring(order, hosts);
  }
  EXPECT_FALSE(is_identity({1, 0}));
}

TEST(RingOrder, DescribesWhereTheRingLeavesAHost) {
  const std::vector<std::string> hosts{"a", "b", "a", "b"};
  EXPECT_EQ(describe_ring(ring_order(hosts), hosts), "0 2 | 1 3");
  EXPECT_EQ(describe_ring({0, 1}, {"a", "a"}), "0 1");
}

// Counts, for a ring all_reduce of 4 ranks on 2 hosts placed round-robin, which messages cross
// from one host to the other at each step of the ring: per host and per step, the number of
// ranks that send across, and the bytes crossing in all.
struct Crossings {
  std::map<std::pair<std::string, size_t>, std::set<int>> senders;  // (host, step) -> ranks sending across
  size_t bytes = 0;
  bool ok = false;
};

Crossings count_crossings(const std::vector<std::string>& hosts, std::shared_ptr<const std::vector<int>> order,
                          size_t count) {
  static float send_dummy, recv_dummy;
  CollectiveArgs a;
  a.kind = Kind::all_reduce;
  a.count = count;
  a.send = &send_dummy;
  a.recv = &recv_dummy;
  const int n = static_cast<int>(hosts.size());
  // One segment per chunk: the step index is the ring step.
  testing::SimResult res = testing::simulate(a, Algo::ring, n, size_t{1} << 20, 0, 1, std::move(order));
  Crossings c;
  c.ok = res.ok;
  EXPECT_TRUE(res.ok) << res.error;
  for (const auto& m : res.sent) {
    const std::string& from = hosts[static_cast<size_t>(m.from)];
    if (from == hosts[static_cast<size_t>(m.to)]) continue;
    c.senders[{from, m.step}].insert(m.from);
    c.bytes += m.bytes;
  }
  return c;
}

TEST(RingOrder, OrderedRingAllReduceCrossesEachHostOncePerStep) {
  const std::vector<std::string> hosts{"a", "b", "a", "b"};
  const size_t count = 1024, share = count * sizeof(float) / hosts.size();
  const size_t steps = 2 * (hosts.size() - 1);  // reduce-scatter, then all-gather

  const Crossings ordered =
      count_crossings(hosts, std::make_shared<const std::vector<int>>(ring_order(hosts)), count);
  ASSERT_TRUE(ordered.ok);
  for (const std::string h : {"a", "b"}) {
    for (size_t step = 0; step < steps; ++step) {
      auto it = ordered.senders.find({h, step});
      ASSERT_NE(it, ordered.senders.end()) << "host " << h << " sends nothing across at step " << step;
      EXPECT_EQ(it->second.size(), 1u) << "host " << h << " step " << step;
    }
  }
  // Two hosts, each sending one share across per step.
  EXPECT_EQ(ordered.bytes, 2 * steps * share);

  // Rank order on the same placement: every hop crosses, twice the bytes.
  const Crossings plain = count_crossings(hosts, nullptr, count);
  ASSERT_TRUE(plain.ok);
  EXPECT_EQ(plain.bytes, 2 * ordered.bytes);
  EXPECT_EQ(plain.senders.at({"a", 0}).size(), 2u);
}

}  // namespace
}  // namespace braid::collectives
