// Faults in the middle of a long loop of checked collectives (fault_rank.cc), ranks started
// without a launcher, so rank 0 serves the store: every survivor must end non-zero within
// BRAID_TIMEOUT_S plus a margin, and name the rank that failed.
#include <gtest/gtest.h>

#include <csignal>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"

namespace braid {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::seconds;
using testing::Subprocess;

// What a survivor may take beyond BRAID_TIMEOUT_S to report and exit: one bounded store call
// (5..10 s), the report's own waits, the exit. Generous for a loaded 2-core machine.
constexpr auto kMargin = seconds(20);

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string line_of(const std::string& output, const std::string& tag, int rank) {
  const std::string want = tag + " rank=" + std::to_string(rank) + " ";
  size_t at = output.find(want);
  while (at != std::string::npos && at != 0 && output[at - 1] != '\n') at = output.find(want, at + 1);
  return at == std::string::npos ? "" : output.substr(at, output.find('\n', at) - at);
}

// fault_rank with `extra` for every rank, over a long rendezvous bound.
testing::RankJob fault_job(const testing::EnvMap& extra) {
  testing::RankJob job{.argv = {testing::binary_from_env("FAULT_RANK")},
                       .env = {{"BRAID_RENDEZVOUS_TIMEOUT_S", "300"}}};
  for (const auto& [k, v] : extra) job.env[k] = v;
  return job;
}

// Until every rank printed READY (rendezvous done, first iteration right), at most 60 s.
bool wait_until_ready(const std::vector<std::unique_ptr<Subprocess>>& ranks) {
  const auto deadline = Clock::now() + seconds(60);
  for (;;) {
    bool all = true;
    for (size_t r = 0; r < ranks.size(); ++r) all = all && has(ranks[r]->output(), "READY rank=" + std::to_string(r));
    if (all) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Every rank but `victim` exits non-zero by `bound` after the fault, with a FAILED line naming
// `victim` as the rank that failed, and none printed a wrong result.
void expect_survivors_name(std::vector<std::unique_ptr<Subprocess>>& ranks, int victim, Clock::time_point fault_at,
                           Clock::duration bound, const std::vector<std::string>& also = {}) {
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (r == victim) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(fault_at + bound - Clock::now());
    const int rc = ranks[r]->wait(std::max(left, std::chrono::milliseconds(0)));
    const std::string out = ranks[r]->output();
    ASSERT_NE(rc, -1) << "rank " << r << " still running " << std::chrono::duration_cast<seconds>(bound).count()
                      << " s after the fault on rank " << victim << ":\n" << out;
    EXPECT_EQ(rc, 3) << "rank " << r << ":\n" << out;
    EXPECT_FALSE(has(out, "WRONG")) << out;
    const std::string failed = line_of(out, "FAILED", r);
    EXPECT_TRUE(has(failed, "because of rank " + std::to_string(victim) + " ") ||
                has(failed, "because of rank " + std::to_string(victim) + ":"))
        << "rank " << r << " does not name rank " << victim << ": " << failed;
    for (const std::string& part : also) EXPECT_TRUE(has(failed, part)) << "want '" << part << "' in: " << failed;
  }
}

// Rank 0 serves the store and is stopped mid-loop: the survivors' operations time out, and the
// store cannot be asked why. They used to block reading from the stopped store for the
// rendezvous timeout (300 s here), twice; now one store call costs at most 5..10 s.
TEST(Faults, StoppedRankServingTheStoreIsNamedWithinTheTimeout) {
  const int size = 4, timeout_s = 5;
  auto ranks = testing::start_ranks(size, fault_job({{"BRAID_TIMEOUT_S", std::to_string(timeout_s)}}));
  ASSERT_TRUE(wait_until_ready(ranks)) << ranks[0]->output();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ranks[0]->kill(SIGSTOP);
  const auto stopped_at = Clock::now();
  expect_survivors_name(ranks, 0, stopped_at, seconds(timeout_s) + kMargin,
                        {"BRAID_TIMEOUT_S", "the store that rank 0 serves at 127.0.0.1:", "did not answer within 5.0 s"});
  ranks[0]->kill(SIGKILL);
}

// Rank 0 (serving the store) is killed: its neighbours see it go, the others see a neighbour
// close its connections in reaction, and none of them can read the failure board. Each must
// still name rank 0, not the neighbour that closed on it.
TEST(Faults, KilledRankZeroIsNamedByEverySurvivor) {
  const int size = 10;
  std::mt19937 rng(17);
  for (int trial = 0; trial < 3; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    auto ranks = testing::start_ranks(size, fault_job({{"BRAID_TIMEOUT_S", "20"}}));
    ASSERT_TRUE(wait_until_ready(ranks)) << ranks[0]->output();
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 500));
    ranks[0]->kill(SIGKILL);
    expect_survivors_name(ranks, 0, Clock::now(), seconds(20) + kMargin);
  }
}

// Over shm (every rank on this host) a rank killed mid-loop is seen through its pidfd: every
// survivor names it, and nothing is left in /dev/shm (the rings are memfds).
TEST(Faults, KilledRankOverShmIsNamedAndLeavesNoFiles) {
  // Other programs on the machine come and go in /dev/shm meanwhile: Python's multiprocessing
  // semaphores (sem.*) and torch's tensors (torch_*) are theirs, never braid's.
  auto dev_shm = [] {
    std::set<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      const std::string name = e.path().filename();
      if (name.rfind("sem.", 0) != 0 && name.rfind("torch_", 0) != 0) names.insert(name);
    }
    return names;
  };
  const auto before = dev_shm();
  auto ranks = testing::start_ranks(4, fault_job({{"BRAID_TIMEOUT_S", "20"}, {"BRAID_TRANSPORT", "shm"}}));
  ASSERT_TRUE(wait_until_ready(ranks)) << ranks[0]->output();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ranks[2]->kill(SIGKILL);
  expect_survivors_name(ranks, 2, Clock::now(), seconds(20) + kMargin);
  ranks.clear();
  EXPECT_EQ(dev_shm(), before);
}

}  // namespace
}  // namespace braid
