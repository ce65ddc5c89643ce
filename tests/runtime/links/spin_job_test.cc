// The spin rule (runtime/links/spin_policy.h) in real jobs: rank processes confined with taskset the
// way a launcher or a user confines them, started directly or by braidrun, each running one
// all_reduce at BRAID_DEBUG=INFO. The INFO line each rank prints says the spin it settled on.
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"

namespace braid {
namespace {

using testing::Subprocess;

constexpr auto kBound = std::chrono::seconds(60);  // each job takes well under a second
const char* kTaskset = "/usr/bin/taskset";
const std::string kUnset = "\x01";  // Subprocess: remove the variable

// What every rank of these jobs sets besides the rendezvous: INFO lines (which say the spin
// budget) and BRAID_SPIN_US = `spin` (kUnset: not set).
// `transport`: BRAID_TRANSPORT (kUnset: the default, shm between ranks of one host). kTcp: tcp on
// io_uring where the build has it, else on epoll.
const char* const kUring = std::getenv("BRAID_TEST_HAVE_IO_URING");
const std::string kTcp = kUring != nullptr && std::string(kUring) == "1" ? "tcp" : "tcp-poll";
testing::EnvMap spin_env(const std::string& spin, const std::string& transport = kUnset) {
  return {{"BRAID_RENDEZVOUS_TIMEOUT_S", "20"}, {"BRAID_DEBUG", "INFO"}, {"BRAID_SPIN_US", spin},
          {"BRAID_TRANSPORT", transport}};
}

// Starts `cpus.size()` ranks, rank r under `taskset -c cpus[r]` ("" runs it unconfined), each
// doing one all_reduce; returns every rank's output after checking that each succeeded.
std::vector<std::string> run_ranks(const std::vector<std::string>& cpus, const std::string& spin = kUnset,
                                   const std::string& transport = kUnset) {
  const int size = static_cast<int>(cpus.size());
  testing::RankJob job{.argv = {testing::binary_from_env("COMM_RANK"), "sum", "1024"}, .env = spin_env(spin, transport)};
  job.per_rank = [&cpus](int r, testing::EnvMap&, std::vector<std::string>& argv) {
    if (!cpus[r].empty()) argv.insert(argv.begin(), {kTaskset, "-c", cpus[r]});
  };
  auto ranks = testing::start_ranks(size, job);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(ranks[r]->wait(kBound), 0) << "rank " << r << ":\n" << ranks[r]->output();
    out.push_back(ranks[r]->output());
  }
  return out;
}

void expect_each_says(const std::vector<std::string>& outputs, const std::string& line) {
  for (size_t r = 0; r < outputs.size(); ++r) {
    EXPECT_NE(outputs[r].find(line), std::string::npos) << "rank " << r << " should say '" << line << "':\n"
                                                        << outputs[r];
  }
}

// The communicator's INFO line once it is up: the spin its transports and waits were given.
void expect_each_applies(const std::vector<std::string>& outputs, int spin_us) {
  expect_each_says(outputs, "; waiters spin " + std::to_string(spin_us) + " us");
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class SpinJob : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kTaskset, X_OK) != 0) GTEST_SKIP() << kTaskset << " is missing (util-linux)";
    cpu0_ = std::to_string(testing::usable_cpu(0));
    if (testing::usable_cpu(1) >= 0) cpu1_ = std::to_string(testing::usable_cpu(1));
    // With fewer CPUs than 2 ranks the rule keeps a yielding spin instead (spin_policy_test).
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "the host has one CPU: 2 ranks outnumber it";
  }
  std::string cpu0_, cpu1_;  // cpu1_ empty: this process may use one CPU only
};

// Over shm the ranks keep the spin: the shm wait itself stops spinning while its peer is
// queued on its CPU (tests/transport/shm, ShmWait). Over tcp, which cannot see that, they sleep
// at once.
const std::string kOverShm =
    "; every other rank on this host is reached over shm, whose waits stop spinning while the peer is queued on the "
    "waiter's CPU; set BRAID_SPIN_US to override";

TEST_F(SpinJob, RanksConfinedToOneCpuSpinOverShm) {
  auto out = run_ranks({cpu0_, cpu0_});
  expect_each_says(out, "INFO: spin 50 us: 2 ranks on this host share 1 CPU" + kOverShm);
  expect_each_applies(out, 50);
}

TEST_F(SpinJob, RanksConfinedToOneCpuSleepAtOnceOverTcp) {
  auto out = run_ranks({cpu0_, cpu0_}, kUnset, kTcp);
  expect_each_says(out, "INFO: spin 0 us: 2 ranks on this host share 1 CPU; set BRAID_SPIN_US to override");
  expect_each_applies(out, 0);
}

TEST_F(SpinJob, RanksOnACpuEachKeepTheDefaultSpin) {
  if (cpu1_.empty()) GTEST_SKIP() << "this process may use one CPU only";
  auto out = run_ranks({cpu0_, cpu1_});
  expect_each_says(out, "INFO: spin 50 us: no other rank on this host may run on this rank's 1 CPU");
  expect_each_applies(out, 50);
  for (const auto& o : out) EXPECT_EQ(o.find("spin 0 us"), std::string::npos) << o;
}

TEST_F(SpinJob, RanksFreeOnEveryCpuSpinOverShmAndSleepAtOnceOverTcp) {
  if (cpu1_.empty()) GTEST_SKIP() << "this process may use one CPU only";
  expect_each_says(run_ranks({"", ""}), kOverShm);
  expect_each_says(run_ranks({"", ""}), "INFO: spin 50 us: 2 ranks on this host share ");
  expect_each_says(run_ranks({"", ""}, kUnset, kTcp), "INFO: spin 0 us: 2 ranks on this host share ");
}

TEST_F(SpinJob, AnExplicitSettingIsKept) {
  auto out = run_ranks({cpu0_, cpu0_}, "20");
  expect_each_says(out, "INFO: spin 20 us: BRAID_SPIN_US is set");
  expect_each_applies(out, 20);
  for (const auto& o : out) EXPECT_EQ(o.find("spin 0 us"), std::string::npos) << o;
}

TEST_F(SpinJob, OneRankSetsItAndTheOtherDecides) {
  // Each rank chooses for itself; the one that set nothing still counts the other.
  const int port = testing::free_port();
  Subprocess set({kTaskset, "-c", cpu0_, testing::binary_from_env("COMM_RANK"), "sum", "1024"},
                 testing::rank_env(port, 0, 2, spin_env("20", kTcp)));
  Subprocess unset({kTaskset, "-c", cpu0_, testing::binary_from_env("COMM_RANK"), "sum", "1024"},
                   testing::rank_env(port, 1, 2, spin_env(kUnset, kTcp)));
  ASSERT_EQ(set.wait(kBound), 0) << set.output();
  ASSERT_EQ(unset.wait(kBound), 0) << unset.output();
  EXPECT_NE(set.output().find("spin 20 us: BRAID_SPIN_US is set"), std::string::npos) << set.output();
  EXPECT_NE(unset.output().find("spin 0 us: 2 ranks on this host share 1 CPU"), std::string::npos) << unset.output();
}

// braidrun as launched by hand: three ranks confined to one CPU by taskset (braidrun cannot
// give each its own): the spin over shm, or, where the host has fewer CPUs than 3, the default spin that
// yields on each pass; and two ranks with its default binding on two CPUs or more.
TEST_F(SpinJob, UnderBraidrun) {
  const char* braidrun = std::getenv("BRAIDRUN");
  if (!braidrun) GTEST_SKIP() << "BRAIDRUN not set (braidrun not built)";
  const std::map<std::string, std::string> env = {
      {"BRAID_DEBUG", "INFO"}, {"BRAID_SPIN_US", kUnset}, {"BRAID_RENDEZVOUS_TIMEOUT_S", "20"}};
  Subprocess one_cpu({kTaskset, "-c", cpu0_, braidrun, "--standalone", "--nproc-per-node", "3",
                      testing::binary_from_env("COMM_RANK"), "sum", "1024"},
                     env);
  ASSERT_EQ(one_cpu.wait(kBound), 0) << one_cpu.output();
  const std::string want = sysconf(_SC_NPROCESSORS_ONLN) >= 3
                               ? "INFO: spin 50 us: 3 ranks on this host share 1 CPU; every other rank on this host is "
                                 "reached over shm"
                               : "INFO: spin 50 us: 3 ranks on this host share 1 CPU (3 ranks, more than the host's";
  EXPECT_EQ(count_of(one_cpu.output(), want), 3) << one_cpu.output();

  if (cpu1_.empty()) GTEST_SKIP() << "this process may use one CPU only: no binding to compare";
  Subprocess bound({braidrun, "--standalone", "--nproc-per-node", "2", testing::binary_from_env("COMM_RANK"), "sum", "1024"},
                   env);
  ASSERT_EQ(bound.wait(kBound), 0) << bound.output();
  EXPECT_EQ(count_of(bound.output(), "INFO: spin 50 us: no other rank on this host may run on this rank's"), 2)
      << bound.output();
}

}  // namespace
}  // namespace braid
