// The spin rule (runtime/links/spin_policy.h) as a table: where ranks run and on which CPUs, whether
// BRAID_SPIN_US is set, and the spin each case must get. Also the CPU card's text form.
#include "runtime/links/spin_policy.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace braid {
namespace {

using transport::cpu_mask_of;

struct Case {
  const char* what;
  std::vector<RankCpus> ranks;  // every rank of the communicator
  int rank;                     // the one deciding
  std::optional<int> explicit_us;
  int affinity_cpus;
  int online_cpus;
  int want_us;
  const char* want_why;  // a part of the reason
};

RankCpus on(const char* host, std::initializer_list<size_t> cpus) { return {host, cpu_mask_of(cpus)}; }
RankCpus unknown_on(const char* host) { return {host, transport::CpuMask{}}; }
// A rank reached over shm, whose waits watch where it runs (Capabilities::watches_peer_cpu).
RankCpus shm_on(const char* host, std::initializer_list<size_t> cpus) { return {host, cpu_mask_of(cpus), true}; }

SpinChoice decide(const Case& c) {
  SpinInputs in;
  in.explicit_us = c.explicit_us;
  in.default_us = 50;
  in.affinity_cpus = c.affinity_cpus;
  in.online_cpus = c.online_cpus;
  count_sharing(c.ranks, c.rank, in);
  return choose_spin(in);
}

TEST(SpinPolicy, Table) {
  const std::vector<Case> cases = {
      {"2 ranks free on 2 CPUs (torchrun, mp.spawn)", {on("a", {0, 1}), on("a", {0, 1})}, 0, {}, 2, 2, 0,
       "2 ranks on this host share 2 CPUs"},
      {"4 ranks free on 2 of 8 CPUs (a cpuset)", {on("a", {0, 1}), on("a", {0, 1}), on("a", {0, 1}), on("a", {0, 1})},
       3, {}, 2, 8, 0, "4 ranks on this host share 2 CPUs;"},
      {"4 ranks free on a host of 2 CPUs: spinners yield", {on("a", {0, 1}), on("a", {0, 1}), on("a", {0, 1}), on("a", {0, 1})},
       3, {}, 2, 2, 50, "4 ranks on this host share 2 CPUs (4 ranks, more than the host's 2 CPUs: spinners yield"},
      {"8 ranks free on 64 CPUs: still free to meet", {on("a", {0, 1, 2, 3}), on("a", {0, 1, 2, 3})}, 1, {}, 4, 4, 0,
       "share 4 CPUs"},
      {"2 ranks bound to a CPU each (braidrun --cpu-bind auto)", {on("a", {0}), on("a", {1})}, 0, {}, 1, 2, 50,
       "no other rank"},
      {"2 ranks bound to 2 CPUs each", {on("a", {0, 1}), on("a", {2, 3})}, 1, {}, 2, 4, 50, "no other rank"},
      {"2 ranks both confined to CPU 0 (taskset -c 0)", {on("a", {0}), on("a", {0})}, 1, {}, 1, 2, 0,
       "2 ranks on this host share 1 CPU;"},
      {"4 ranks, 2 bound to each of 2 CPUs of 4", {on("a", {0}), on("a", {0}), on("a", {1}), on("a", {1})}, 2, {}, 1, 4,
       0, "2 ranks on this host share 1 CPU;"},
      {"4 ranks, 2 bound to each CPU of 2", {on("a", {0}), on("a", {0}), on("a", {1}), on("a", {1})}, 2, {}, 1, 2, 50,
       "2 ranks on this host share 1 CPU (4 ranks, more than the host's 2 CPUs"},
      {"bound to CPU 0, a free rank may come there", {on("a", {0}), on("a", {0, 1}), on("a", {1})}, 0, {}, 1, 4, 0,
       "2 ranks on this host share 2 CPUs"},
      {"3 ranks confined to CPU 0 of 2", {on("a", {0}), on("a", {0}), on("a", {0})}, 0, {}, 1, 2, 50,
       "3 ranks on this host share 1 CPU (3 ranks, more than"},
      {"2 ranks free on 2 CPUs over shm: its waits watch for stacking", {on("a", {0, 1}), shm_on("a", {0, 1})}, 0, {}, 2,
       2, 50, "every other rank on this host is reached over shm"},
      {"2 ranks on CPU 0 over shm", {shm_on("a", {0}), shm_on("a", {0})}, 1, {}, 1, 2, 50,
       "2 ranks on this host share 1 CPU; every other rank on this host is reached over shm"},
      {"bound to a CPU each, over shm: the bound reason", {on("a", {0}), shm_on("a", {1})}, 0, {}, 1, 2, 50,
       "no other rank"},
      {"unknown masks, over shm", {unknown_on("a"), {"a", transport::CpuMask{}, true}}, 0, {}, 2000, 2000, 50,
       "reached over shm"},
      {"3 ranks free, one reached over tcp: the rule decides", {on("a", {0, 1}), shm_on("a", {0, 1}), on("a", {0, 1})}, 0,
       {}, 2, 4, 0, "3 ranks on this host share 2 CPUs"},
      {"a peer over shm, one more on another host", {on("a", {0, 1}), shm_on("a", {0, 1}), on("b", {0, 1})}, 0, {}, 2,
       2, 50, "reached over shm"},
      {"over shm but set: kept", {on("a", {0, 1}), shm_on("a", {0, 1})}, 0, 0, 2, 2, 0, "BRAID_SPIN_US is set"},
      {"one rank per host", {on("a", {0, 1}), on("b", {0, 1})}, 0, {}, 2, 2, 50, "the only rank"},
      {"a single rank", {on("a", {0, 1})}, 0, {}, 2, 2, 50, "the only rank"},
      {"ranks on another host do not count", {on("a", {0}), on("b", {0}), on("a", {1}), on("b", {1})}, 0, {}, 1, 2, 50,
       "no other rank"},
      {"set: kept where ranks share", {on("a", {0, 1}), on("a", {0, 1})}, 0, 20, 2, 2, 20, "BRAID_SPIN_US is set"},
      {"set: kept where they do not", {on("a", {0}), on("a", {1})}, 0, 0, 1, 2, 0, "BRAID_SPIN_US is set"},
      {"set to the default: kept", {on("a", {0}), on("a", {0})}, 0, 50, 1, 2, 50, "BRAID_SPIN_US is set"},
      // A mask beyond host_identity's bitmap is unknown: counts decide (the rank's share).
      {"unknown mask, free on all CPUs", {unknown_on("a"), on("a", {0})}, 0, {}, 2000, 2000, 0, "each free to run on"},
      {"unknown mask, more ranks than CPUs", {unknown_on("a"), unknown_on("a"), unknown_on("a")}, 0, {}, 2, 2, 50,
       "3 ranks on this host, more than the host's 2 CPUs: spinners yield"},
      {"unknown mask, bound to its share", {unknown_on("a"), unknown_on("a")}, 0, {}, 1000, 2000, 50, "bound to"},
      {"unknown mask of a peer, bound to one CPU", {on("a", {0}), unknown_on("a")}, 0, {}, 1, 2, 50, "bound to 1 CPU"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const SpinChoice got = decide(c);
    EXPECT_EQ(got.spin_us, c.want_us);
    EXPECT_NE(got.why.find(c.want_why), std::string::npos) << got.why;
    if (!c.explicit_us) {
      EXPECT_NE(got.why.find("set BRAID_SPIN_US to override"), std::string::npos) << got.why;
    }
  }
}

TEST(SpinPolicy, CountsOnlyThisHostsRanksWhoseCpusMeet) {
  SpinInputs in;
  count_sharing({on("a", {0, 1}), on("b", {0, 1}), on("a", {1, 2}), on("a", {3})}, 0, in);
  EXPECT_EQ(in.local_ranks, 3);
  EXPECT_EQ(in.sharing_ranks, 2);
  EXPECT_EQ(in.sharing_cpus, 3);  // 0-1 and 1-2
  EXPECT_EQ(in.watched_ranks, 0);
  count_sharing({on("a", {0, 1}), shm_on("a", {0, 1}), shm_on("b", {0, 1}), on("a", {1})}, 0, in);
  EXPECT_EQ(in.local_ranks, 3);
  EXPECT_EQ(in.watched_ranks, 1) << "only this host's ranks count";
}

TEST(SpinPolicy, CardRoundTrips) {
  RankCpus r = on("5e1c0a3e-0c8b-4f43-9d7e-1f2a3b4c5d6e/net:4026531992/shm:24", {0, 3, 64, 1023});
  const auto back = parse_cpus_card(cpus_card(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->host, r.host);
  EXPECT_EQ(back->cpus, r.cpus);
  const auto none = parse_cpus_card(cpus_card(unknown_on("h")));
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(transport::cpu_count(none->cpus), 0u);
}

TEST(SpinPolicy, RefusesCardsItCannotRead) {
  const std::string good = cpus_card(on("h", {1}));
  EXPECT_TRUE(parse_cpus_card(good).has_value());
  for (const std::string& bad : {std::string(""), std::string("h"), std::string("\t") + good.substr(2),
                                 good.substr(0, good.size() - 1), good + ",", good + "0",
                                 "h\t" + std::string(16, 'g') + good.substr(2 + 16)}) {
    EXPECT_FALSE(parse_cpus_card(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace braid
