#include "common/spin.h"

#include <pthread.h>
#include <sched.h>

#include <gtest/gtest.h>

#include "tests/support/subprocess.h"

#include <optional>
#include <thread>
#include <vector>

namespace braid {
namespace {

// Runs `body` on a new thread allowed on CPU 0 only, so usable_cpus() is 1 there.
template <typename F>
void on_one_cpu(F body) {
  std::thread t([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof set, &set), 0);
    body();
  });
  t.join();
}

cpu_set_t set_of(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return set;
}

// A waiter that finds the thread it waits for queued behind it steps off its CPU: the kernel
// moves it to another CPU of its mask, and the mask is what it was. Confined to one CPU, it
// stays and says so.
TEST(Spin, StepOffCpuMovesTheThreadAndKeepsItsMask) {
  const std::vector<int> cpus = {testing::usable_cpu(0), testing::usable_cpu(1)};
  if (cpus[1] < 0) GTEST_SKIP() << "one usable CPU: nowhere to step to";
  std::thread t([&] {
    const cpu_set_t one = set_of({cpus[0]}), two = set_of({cpus[0], cpus[1]});
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    ASSERT_EQ(sched_getcpu(), cpus[0]);
    EXPECT_FALSE(step_off_cpu(cpus[0])) << "confined to one CPU";
    EXPECT_EQ(sched_getcpu(), cpus[0]);
    ASSERT_EQ(sched_setaffinity(0, sizeof two, &two), 0);  // free again (most likely still on the first)
    const int was = sched_getcpu();
    EXPECT_TRUE(step_off_cpu(was));
    EXPECT_NE(sched_getcpu(), was) << "the kernel moves the thread before the call returns";
    cpu_set_t now;
    ASSERT_EQ(sched_getaffinity(0, sizeof now, &now), 0);
    EXPECT_TRUE(CPU_EQUAL(&now, &two)) << "the mask is restored";
    EXPECT_FALSE(step_off_cpu(-1));
  });
  t.join();
}

TEST(Spin, ScopesAreCounted) {
  const int before = spinning_threads();
  {
    SpinScope a;
    EXPECT_EQ(spinning_threads(), before + 1);
    {
      SpinScope b;
      EXPECT_EQ(spinning_threads(), before + 2);
    }
    EXPECT_EQ(spinning_threads(), before + 1);
  }
  EXPECT_EQ(spinning_threads(), before);
}

TEST(Spin, UsableCpusFollowsTheThreadsAffinity) {
  on_one_cpu([] { EXPECT_EQ(usable_cpus(), 1); });
  EXPECT_GE(usable_cpus(), 1);
}

// A lone spinner must not give its CPU to a thread that computes (that costs a whole scheduler
// slice): it pauses instead. Two spinners on one CPU must yield to each other.
TEST(Spin, YieldsOnlyWhenSpinnersOutnumberCpus) {
  on_one_cpu([] {
    ASSERT_EQ(spinning_threads(), 0);
    SpinScope alone;
    const long before = spin_yields();
    for (int i = 0; i < 1000; ++i) alone.pause();
    EXPECT_EQ(spin_yields(), before);
    SpinScope second;  // another spinner, counted as if it were a second thread on this CPU
    for (int i = 0; i < 1000; ++i) alone.pause();
    EXPECT_EQ(spin_yields(), before + 1000);
  });
}

// A background thread spins only while someone waits for a result; other threads always may.
TEST(Spin, BackgroundThreadsSpinOnlyForWaiters) {
  EXPECT_TRUE(spin_allowed());
  std::thread([] {
    spin_only_for_waiters();
    EXPECT_FALSE(spin_allowed());
    {
      WaitScope someone_waits;
      EXPECT_TRUE(spin_allowed());
    }
    EXPECT_FALSE(spin_allowed());
  }).join();
  EXPECT_TRUE(spin_allowed());
}

// A peer process on our only CPU cannot answer while we spin: no waiter spins while one is
// known, and a spinner that spins anyway yields. Both end with the last SharedCpuPeer.
TEST(Spin, APeerOnOurOnlyCpuStopsSpinning) {
  on_one_cpu([] {
    ASSERT_EQ(cpu_sharing_peers(), 0);
    ASSERT_TRUE(spin_allowed());
    SpinScope alone;
    long before = spin_yields();
    alone.pause();
    ASSERT_EQ(spin_yields(), before) << "a lone spinner yields already; the test would prove nothing";
    {
      SharedCpuPeer first;
      std::optional<SharedCpuPeer> second(std::in_place);
      EXPECT_EQ(cpu_sharing_peers(), 2);
      EXPECT_FALSE(spin_allowed());
      for (int i = 0; i < 100; ++i) alone.pause();
      EXPECT_EQ(spin_yields(), before + 100);
      second.reset();  // one connection closed, the other still shares the CPU
      EXPECT_EQ(cpu_sharing_peers(), 1);
      EXPECT_FALSE(spin_allowed());
    }
    EXPECT_EQ(cpu_sharing_peers(), 0);
    EXPECT_TRUE(spin_allowed());
    before = spin_yields();
    alone.pause();
    EXPECT_EQ(spin_yields(), before);
  });
}

// More ranks on the node than CPUs: their spinners share CPUs, so even a lone one yields.
// (Last: the setting stays for the rest of the process.)
TEST(Spin, YieldsWhenTheNodeHasMoreRanksThanCpus) {
  on_one_cpu([] {
    SpinScope alone;
    set_ranks_on_node(1);
    const long before = spin_yields();
    alone.pause();
    EXPECT_EQ(spin_yields(), before);
    set_ranks_on_node(static_cast<int>(std::thread::hardware_concurrency()) + 1);
    alone.pause();
    EXPECT_EQ(spin_yields(), before + 1);
  });
}

}  // namespace
}  // namespace braid
