// Communicator::shrink with real rank processes (shrink_rank.cc) meeting through env:// without a
// launcher, so rank 0 serves the store: a rank killed, a planned exclusion, a stopped rank that
// comes back, and the store's own rank killed. Codes appear as braid::to_string spells them.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/runtime/shrink/shrink_output.h"
#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"
#include "tests/support/two_hosts.h"

namespace braid {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Subprocess;

constexpr int kRanks = 4;
// Every run ends well within this on a loaded 2-core machine; a hang fails the test instead.
constexpr auto kBound = seconds(90);

using testing::has;
using testing::line_of;

std::vector<std::unique_ptr<Subprocess>> start(const testing::EnvMap& env, const std::vector<std::string>& args,
                                               std::function<void(int, std::vector<std::string>&)> per_rank = nullptr) {
  testing::RankJob job{.argv = {testing::binary_from_env("SHRINK_RANK")},
                       .env = {{"BRAID_RENDEZVOUS_TIMEOUT_S", "120"}}};
  for (const auto& a : args) job.argv.push_back(a);
  for (const auto& [k, v] : env) job.env[k] = v;
  if (per_rank) job.per_rank = [&](int r, testing::EnvMap&, std::vector<std::string>& argv) { per_rank(r, argv); };
  return testing::start_ranks(kRanks, job);
}

// Waits (bounded) until rank r's output has `tag` for every r in `ranks`.
bool wait_for(const std::vector<std::unique_ptr<Subprocess>>& procs, const std::vector<int>& ranks, const std::string& tag) {
  const auto deadline = Clock::now() + kBound;
  for (;;) {
    bool all = true;
    for (int r : ranks) all = all && !line_of(procs[static_cast<size_t>(r)]->output(), tag, r).empty();
    if (all) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

int finish(Subprocess& p) { return p.wait(std::chrono::duration_cast<milliseconds>(kBound)); }

// The t= of rank r's line `tag` (CLOCK_MONOTONIC ns, as the rank printed it); 0 when none.
int64_t time_of(Subprocess& p, const std::string& tag, int r) {
  const std::string line = line_of(p.output(), tag, r);
  const size_t at = line.find(" t=");
  return at == std::string::npos ? 0 : std::stoll(line.substr(at + 3));
}

// Rank r's shrink() call, from its old communicator's failure to shrink() returning, took less
// than `bound`: a detection bound, asserted against a window (BRAID_SHRINK_TIMEOUT_S) twice as long.
void expect_shrink_within(Subprocess& p, int r, seconds bound) {
  const int64_t failed = time_of(p, "FAILED", r), shrunk = time_of(p, "SHRUNK", r);
  ASSERT_TRUE(failed > 0 && shrunk > 0) << p.output();
  EXPECT_LT(shrunk - failed, std::chrono::nanoseconds(bound).count())
      << "rank " << r << "'s shrink() waited out its window for a dead rank:\n" << p.output();
}

// tcp's io_uring engine is not in a build without liburing: its epoll engine stands in.
std::string transport_here(const std::string& name) {
  const char* uring = std::getenv("BRAID_TEST_HAVE_IO_URING");
  const bool have_uring = uring != nullptr && std::string(uring) == "1";
  return name == "tcp" && !have_uring ? "tcp-poll" : name;
}

// A shrink window long enough that waiting it out for a dead rank fails expect_shrink_within.
constexpr auto kLongWindow = seconds(20);

// Every one of `survivors` (old ranks, in order) got the new communicator, ranked in the same
// order, ran it without a wrong result and exited 0.
void expect_went_on(std::vector<std::unique_ptr<Subprocess>>& procs, const std::vector<int>& survivors) {
  std::string olds;
  for (int r : survivors) {
    if (!olds.empty()) olds.push_back(',');
    olds.append(std::to_string(r));
  }
  for (size_t i = 0; i < survivors.size(); ++i) {
    const int r = survivors[i];
    Subprocess& p = *procs[static_cast<size_t>(r)];
    const int rc = finish(p);
    const std::string out = p.output();
    EXPECT_EQ(rc, 0) << "rank " << r << ":\n" << out;
    EXPECT_FALSE(has(out, "WRONG")) << out;
    EXPECT_TRUE(has(line_of(out, "SHRUNK", r), "new_rank=" + std::to_string(i) + " size=" + std::to_string(survivors.size())))
        << "rank " << r << ":\n" << out;
    EXPECT_EQ(line_of(out, "MEMBERS", r), "MEMBERS rank=" + std::to_string(r) + " old=" + olds) << out;
    EXPECT_FALSE(line_of(out, "DONE", r).empty()) << out;
    // Rank 0's store served every communicator to the end, the old one gone or not.
    EXPECT_FALSE(has(out, "the store is gone")) << out;
  }
}

// kill -9 of rank 2 mid-loop: ranks 0, 1, 3 fail, shrink, and go on as ranks 0, 1, 2 of three,
// over each transport. Each destroys its old communicator as soon as shrink() returned
// (comm = comm.shrink()): rank 0's store must stay up for the others' new communicator.
class ShrinkOver : public ::testing::TestWithParam<const char*> {};

TEST_P(ShrinkOver, KilledRankIsLeftOutAndTheOthersGoOnRenumbered) {
  const std::string transport = transport_here(GetParam());
  auto procs = start({{"BRAID_TIMEOUT_S", "30"}, {"BRAID_TRANSPORT", transport}}, {"--drop-old"});
  ASSERT_TRUE(wait_for(procs, {0, 1, 2, 3}, "READY")) << procs[0]->output();
  std::this_thread::sleep_for(milliseconds(200));
  procs[2]->kill(SIGKILL);
  expect_went_on(procs, {0, 1, 3});
  for (int r : {0, 1, 3}) {
    const std::string failed = line_of(procs[static_cast<size_t>(r)]->output(), "FAILED", r);
    EXPECT_TRUE(has(failed, "rank 2")) << failed;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ShrinkOver, ::testing::Values("shm", "tcp"));

// kill -9 of ranks 1 and 3 at once, as when a host of two ranks is lost. Each survivor's failure
// names the first dead rank it saw; the other's connection ended too, without the closing mark
// a survivor leaves on the failure board, so shrink() does not wait the window for it either.
// Rank 2 calls shrink() 2 s late, alive: it is waited for, and is in.
class ShrinkTwoKilled : public ::testing::TestWithParam<const char*> {};

TEST_P(ShrinkTwoKilled, NeitherDeadRankIsWaitedForAndASlowSurvivorIs) {
  auto procs = start({{"BRAID_TIMEOUT_S", "30"},
                      {"BRAID_TRANSPORT", transport_here(GetParam())},
                      {"BRAID_SHRINK_TIMEOUT_S", std::to_string(kLongWindow.count())}},
                     {}, [](int r, std::vector<std::string>& argv) {
                       if (r == 2) argv.insert(argv.end(), {"--shrink-delay-ms", "2000"});
                     });
  ASSERT_TRUE(wait_for(procs, {0, 1, 2, 3}, "READY")) << procs[0]->output();
  std::this_thread::sleep_for(milliseconds(200));
  procs[1]->kill(SIGKILL);
  procs[3]->kill(SIGKILL);
  expect_went_on(procs, {0, 2});
  expect_shrink_within(*procs[0], 0, kLongWindow / 2);
  expect_shrink_within(*procs[2], 2, kLongWindow / 2);
  for (int r : {0, 2}) {
    const std::string failed = line_of(procs[static_cast<size_t>(r)]->output(), "FAILED", r);
    EXPECT_TRUE(has(failed, "rank 1") || has(failed, "rank 3")) << failed;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ShrinkTwoKilled, ::testing::Values("shm", "tcp"));

// Rank 2 aborts its communicator (the others' operations fail), then calls shrink() 3 s after
// them. Its connections ended, but on purpose: its closing mark is on the failure board, so the
// others wait for it as for any live rank, and all four go on.
TEST(Shrink, RankThatClosedItsConnectionsOnPurposeIsWaitedFor) {
  auto procs = start({{"BRAID_TIMEOUT_S", "30"}, {"BRAID_SHRINK_TIMEOUT_S", std::to_string(kLongWindow.count())}}, {},
                     [](int r, std::vector<std::string>& argv) {
                       if (r == 2) argv.insert(argv.end(), {"--abort-after", "20", "--shrink-delay-ms", "3000"});
                     });
  expect_went_on(procs, {0, 1, 2, 3});
  EXPECT_TRUE(has(line_of(procs[2]->output(), "FAILED", 2), "code=aborted")) << procs[2]->output();
}

// A planned exclusion with nobody failed: ranks 0 and 2 call shrink({1, 3}); rank 3 calls it as
// well and gets a non-member handle, rank 1 does not call it (as ncclCommShrink's excluded
// ranks) and leaves. Rank 0 has an operation outstanding that nobody else joins: shrink ends it
// with an error first.
TEST(Shrink, PlannedExclusionWithNobodyFailed) {
  auto procs = start({{"BRAID_TIMEOUT_S", "30"}}, {"--before", "20", "--exclude", "1,3"},
                     [](int r, std::vector<std::string>& argv) {
                       if (r == 3) argv.push_back("--excluded-call-shrink");
                       if (r == 0) argv.push_back("--pending");
                     });
  expect_went_on(procs, {0, 2});
  EXPECT_TRUE(has(line_of(procs[0]->output(), "PENDING_ENDED", 0), "code=aborted")) << procs[0]->output();
  for (int r : {0, 2}) EXPECT_TRUE(line_of(procs[static_cast<size_t>(r)]->output(), "FAILED", r).empty());
  EXPECT_EQ(finish(*procs[1]), 0) << procs[1]->output();
  EXPECT_FALSE(line_of(procs[1]->output(), "LEAVING", 1).empty()) << procs[1]->output();
  EXPECT_EQ(finish(*procs[3]), 0) << procs[3]->output();
  EXPECT_FALSE(line_of(procs[3]->output(), "EXCLUDED", 3).empty()) << procs[3]->output();
}

// Rank 0 serves the store in-process: nobody may exclude it, and every caller is told why.
TEST(Shrink, ExcludingTheRankServingTheStoreIsRefused) {
  auto procs = start({{"BRAID_TIMEOUT_S", "30"}}, {"--before", "3", "--exclude", "0"});
  for (int r : {1, 2, 3}) {
    Subprocess& p = *procs[static_cast<size_t>(r)];
    EXPECT_EQ(finish(p), 5) << p.output();
    const std::string line = line_of(p.output(), "SHRINK_FAILED", r);
    EXPECT_TRUE(has(line, "code=invalid argument") && has(line, "serves the store") && has(line, "braidrun")) << line;
  }
  EXPECT_EQ(finish(*procs[0]), 0) << procs[0]->output();
}

// Under braidrun the store lives in the launcher: rank 0 may be excluded like any other.
TEST(Shrink, UnderBraidrunRankZeroCanBeExcluded) {
  const char* braidrun = std::getenv("BRAIDRUN");
  if (braidrun == nullptr) GTEST_SKIP() << "braidrun is not built (BRAIDRUN unset)";
  Subprocess job({braidrun, "--standalone", "--nproc-per-node", "4", "--cpu-bind", "none",
                  testing::binary_from_env("SHRINK_RANK"), "--before", "20", "--exclude", "0,3"});
  EXPECT_EQ(finish(job), 0) << job.output();
  const std::string out = job.output();
  for (int r : {0, 3}) EXPECT_TRUE(has(out, "LEAVING rank=" + std::to_string(r))) << out;
  EXPECT_TRUE(has(out, "MEMBERS rank=1 old=1,2") && has(out, "MEMBERS rank=2 old=1,2")) << out;
  EXPECT_TRUE(has(out, "DONE rank=1 ") && has(out, "DONE rank=2 ")) << out;
  EXPECT_FALSE(has(out, "WRONG")) << out;
}

// Rank 2 is stopped mid-loop: the others time out, name it, shrink without it and go on. Once
// they run the new communicator it is resumed: its operation and its own shrink() end in
// errors, never a result, and the others finish undisturbed.
TEST(Shrink, StoppedRankThatComesBackGetsAnErrorNeverAResult) {
  auto procs = start({{"BRAID_TIMEOUT_S", "3"}}, {"--after-ms", "3000"});
  ASSERT_TRUE(wait_for(procs, {0, 1, 2, 3}, "READY")) << procs[0]->output();
  std::this_thread::sleep_for(milliseconds(200));
  procs[2]->kill(SIGSTOP);
  ASSERT_TRUE(wait_for(procs, {0, 1, 3}, "FIRST")) << procs[0]->output() << procs[1]->output();
  procs[2]->kill(SIGCONT);
  const int rc = finish(*procs[2]);
  const std::string out = procs[2]->output();
  EXPECT_EQ(rc, 5) << out;
  EXPECT_FALSE(has(out, "WRONG")) << out;
  EXPECT_FALSE(line_of(out, "FAILED", 2).empty()) << out;
  const std::string refused = line_of(out, "SHRINK_FAILED", 2);
  EXPECT_TRUE(has(refused, "code=aborted") && has(refused, "without this rank")) << out;
  expect_went_on(procs, {0, 1, 3});
}

// Four ranks on two namespace hosts, placed round-robin as launchers number them (host 0: ranks
// 0 and 2, rank 0 serving the store; host 1: ranks 1 and 3), with a long shrink window.
std::vector<std::unique_ptr<Subprocess>> start_on_two_hosts(const testing::TwoHosts& hosts, const std::string& timeout_s) {
  testing::RankJob job{.argv = {testing::binary_from_env("SHRINK_RANK"), "--drop-old"},
                       .env = {{"BRAID_RENDEZVOUS_TIMEOUT_S", "120"},
                               {"BRAID_TIMEOUT_S", timeout_s},
                               {"BRAID_SHRINK_TIMEOUT_S", std::to_string(kLongWindow.count())}},
                       .master_addr = hosts.address(0)};
  job.per_rank = [&](int r, testing::EnvMap& env, std::vector<std::string>& argv) {
    for (const auto& [k, v] : hosts.round_robin_env(r, kRanks, std::stoi(env["MASTER_PORT"]))) env[k] = v;
    std::vector<std::string> in_host = hosts.exec_in(r % 2);
    argv.insert(argv.begin(), in_host.begin(), in_host.end());
  };
  return testing::start_ranks(kRanks, job);
}

// Host 1's two ranks are killed at once: ranks 0 and 2 agree across the loss of a whole host,
// without waiting out the window for either dead rank, and go on as ranks 0 and 1 of two.
TEST(Shrink, AcrossTwoNamespaceHostsOneHostsRanksKilled) {
  testing::TwoHosts hosts("bsk", "10.81.0");
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  auto procs = start_on_two_hosts(hosts, "30");
  ASSERT_TRUE(wait_for(procs, {0, 1, 2, 3}, "READY")) << procs[0]->output() << procs[1]->output();
  std::this_thread::sleep_for(milliseconds(200));
  procs[1]->kill(SIGKILL);
  procs[3]->kill(SIGKILL);
  expect_went_on(procs, {0, 2});
  for (int r : {0, 2}) {
    const std::string failed = line_of(procs[static_cast<size_t>(r)]->output(), "FAILED", r);
    EXPECT_TRUE(has(failed, "rank 1") || has(failed, "rank 3")) << failed;
    // Neither dead rank of host 1 is waited for, though each failure names one first.
    expect_shrink_within(*procs[static_cast<size_t>(r)], r, kLongWindow / 2);
  }
}

// Host 1 is cut off (its end of the veth taken down): ranks 1 and 3 live on, unreachable, and
// their connections never end. Ranks 0 and 2 time out; the timeout report lists both as silent,
// so shrink() waits for neither, and ranks 0 and 2 go on as two.
TEST(Shrink, AcrossTwoNamespaceHostsOneHostCutOff) {
  testing::TwoHosts hosts("bsc", "10.81.1");
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  auto procs = start_on_two_hosts(hosts, "3");
  ASSERT_TRUE(wait_for(procs, {0, 1, 2, 3}, "READY")) << procs[0]->output() << procs[1]->output();
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_TRUE(hosts.link_down(1));
  expect_went_on(procs, {0, 2});
  for (int r : {0, 2}) {
    const std::string failed = line_of(procs[static_cast<size_t>(r)]->output(), "FAILED", r);
    EXPECT_TRUE(has(failed, "code=timeout") && has(failed, "did not answer: 1, 3")) << failed;
    expect_shrink_within(*procs[static_cast<size_t>(r)], r, kLongWindow / 2);
  }
  for (int r : {1, 3}) procs[static_cast<size_t>(r)]->kill(SIGKILL);
}

// kill -9 of rank 0, which served the store: no agreement is possible, and every survivor is
// told so and what to use instead.
TEST(Shrink, StoreGoneWithRankZeroIsToldWhatToUse) {
  auto procs = start({{"BRAID_TIMEOUT_S", "30"}}, {});
  ASSERT_TRUE(wait_for(procs, {0, 1, 2, 3}, "READY")) << procs[0]->output();
  std::this_thread::sleep_for(milliseconds(200));
  procs[0]->kill(SIGKILL);
  for (int r : {1, 2, 3}) {
    Subprocess& p = *procs[static_cast<size_t>(r)];
    EXPECT_EQ(finish(p), 5) << p.output();
    const std::string line = line_of(p.output(), "SHRINK_FAILED", r);
    EXPECT_TRUE(has(line, "code=peer lost") && has(line, "rank 0 served it") && has(line, "braidrun")) << p.output();
    EXPECT_FALSE(has(p.output(), "WRONG")) << p.output();
  }
}

}  // namespace
}  // namespace braid
