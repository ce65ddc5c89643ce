// Communicator::shrink over ib with real rank processes, in the Soft-RoCE guest
// (scripts/rdma_guest.sh). Four ranks of shrink_rank (tests/runtime/shrink: checked all_reduces
// until one fails, then shrink(), then checked all_reduces on the new communicator) with
// BRAID_TRANSPORT=ib, even ranks on rxe0 (10.99.0.1) and odd ranks on rxe1 (10.99.0.2), started
// without a launcher so rank 0 serves the store:
//   - rank 2 killed -9: ranks 0, 1, 3 go on as ranks 0, 1, 2 of three;
//   - ranks 1 and 3 killed -9 at once (every rank of rxe1, a lost host): ranks 0 and 2 go on as
//     two, and neither waits out BRAID_SHRINK_TIMEOUT_S for the dead rank it did not fail on
//     (its ib connection ended: Connection::peer_ended()).
// Outside the guest it skips.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/runtime/shrink/shrink_output.h"
#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"
#include "tests/transport/ib/soft_roce_guest.h"

namespace braid::transport::ib {
namespace {

using braid::testing::Subprocess;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kRanks = 4;
// Every run ends well within it under emulation; a hang fails the test instead.
constexpr auto kBound = seconds(150);
// A shrink window long enough that waiting it out for a dead rank shows (expect_shrink_within).
constexpr auto kLongWindow = seconds(40);

using braid::testing::has;
using braid::testing::line_of;

std::vector<std::unique_ptr<Subprocess>> start(const std::vector<std::string>& args) {
  braid::testing::RankJob job{.argv = {SHRINK_RANK},
                              .env = {{"BRAID_TRANSPORT", "ib"},
                                      {"BRAID_TIMEOUT_S", "60"},
                                      {"BRAID_RENDEZVOUS_TIMEOUT_S", "120"},
                                      {"BRAID_SHRINK_TIMEOUT_S", std::to_string(kLongWindow.count())}},
                              .master_addr = "10.99.0.1"};
  for (const auto& a : args) job.argv.push_back(a);
  job.per_rank = [](int r, braid::testing::EnvMap& env, std::vector<std::string>&) {
    env["BRAID_IB_HCA"] = "=rxe" + std::to_string(r % 2);
    env["BRAID_SOCKET_IFNAME"] = "veth" + std::to_string(r % 2);
  };
  return braid::testing::start_ranks(kRanks, job);
}

bool all_ready(const std::vector<std::unique_ptr<Subprocess>>& procs) {
  const auto deadline = Clock::now() + kBound;
  for (;;) {
    bool all = true;
    for (int r = 0; r < kRanks; ++r) all = all && !line_of(procs[static_cast<size_t>(r)]->output(), "READY", r).empty();
    if (all) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(50));
  }
}

// The t= of rank r's line `tag` (CLOCK_MONOTONIC ns, as the rank printed it); 0 when none.
int64_t time_of(const std::string& output, const std::string& tag, int r) {
  const std::string line = line_of(output, tag, r);
  const size_t at = line.find(" t=");
  return at == std::string::npos ? 0 : std::stoll(line.substr(at + 3));
}

// Every one of `survivors` (old ranks, in order) failed naming one of `killed`, got the new
// communicator ranked in the same order within half the shrink window (it waited for no dead
// rank), ran it without a wrong result and exited 0; all within kBound of `since`.
void expect_went_on(std::vector<std::unique_ptr<Subprocess>>& procs, const std::vector<int>& survivors,
                    const std::vector<int>& killed, Clock::time_point since) {
  std::string olds;
  for (int r : survivors) olds += (olds.empty() ? "" : ",") + std::to_string(r);
  for (size_t i = 0; i < survivors.size(); ++i) {
    const int r = survivors[i];
    Subprocess& p = *procs[static_cast<size_t>(r)];
    const auto left = std::chrono::duration_cast<milliseconds>(since + kBound - Clock::now());
    const int rc = p.wait(std::max(left, milliseconds(0)));
    const std::string out = p.output();
    EXPECT_NE(rc, -1) << "rank " << r << " still running " << kBound.count() << " s after the kill:\n" << out;
    EXPECT_EQ(rc, 0) << "rank " << r << ":\n" << out;
    EXPECT_FALSE(has(out, "WRONG")) << out;
    bool named = false;
    for (int k : killed) named = named || has(line_of(out, "FAILED", r), "rank " + std::to_string(k));
    EXPECT_TRUE(named) << "rank " << r << "'s failure names no killed rank:\n" << out;
    EXPECT_TRUE(has(line_of(out, "SHRUNK", r), "new_rank=" + std::to_string(i) + " size=" + std::to_string(survivors.size())))
        << "rank " << r << ":\n" << out;
    EXPECT_EQ(line_of(out, "MEMBERS", r), "MEMBERS rank=" + std::to_string(r) + " old=" + olds) << out;
    EXPECT_FALSE(line_of(out, "DONE", r).empty()) << out;
    const int64_t failed = time_of(out, "FAILED", r), shrunk = time_of(out, "SHRUNK", r);
    if (failed > 0 && shrunk > 0) {
      EXPECT_LT(shrunk - failed, std::chrono::nanoseconds(kLongWindow / 2).count())
          << "rank " << r << "'s shrink() waited out its window for a dead rank:\n" << out;
      std::printf("rank %d: shrink() returned %.0f ms after its failure\n", r, (shrunk - failed) / 1e6);
    }
  }
}

TEST(IbShrinkGuest, KilledRankIsLeftOutAndTheOthersGoOnRenumbered) {
  SKIP_OUTSIDE_GUEST();
  auto procs = start({"--drop-old"});
  ASSERT_TRUE(all_ready(procs)) << procs[0]->output() << procs[1]->output() << procs[2]->output()
                                << procs[3]->output();
  std::this_thread::sleep_for(milliseconds(300));
  procs[2]->kill(SIGKILL);
  expect_went_on(procs, {0, 1, 3}, {2}, Clock::now());
}

TEST(IbShrinkGuest, BothRanksOfOneDeviceKilledAtOnceNeitherIsWaitedFor) {
  SKIP_OUTSIDE_GUEST();
  auto procs = start({});
  ASSERT_TRUE(all_ready(procs)) << procs[0]->output() << procs[1]->output() << procs[2]->output()
                                << procs[3]->output();
  std::this_thread::sleep_for(milliseconds(300));
  procs[1]->kill(SIGKILL);
  procs[3]->kill(SIGKILL);
  expect_went_on(procs, {0, 2}, {1, 3}, Clock::now());
}

}  // namespace
}  // namespace braid::transport::ib
