// A rank waiting at rendezvous says, every few seconds, whom it waits for and where, instead of
// waiting out BRAID_RENDEZVOUS_TIMEOUT_S without a word. Real rank processes (comm_rank) on
// loopback; a short timeout makes the lines come often (a quarter of it, at most 10 s).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
using testing::Subprocess;

constexpr auto kBound = 60s;  // no test here may take anywhere near this long

std::unique_ptr<Subprocess> start_rank(const std::map<std::string, std::string>& env) {
  return std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "join"}, env);
}

TEST(RendezvousProgress, AWaitingRankNamesTheMissingRanksTheStoreAndTheCounts) {
  const int port = testing::free_port();
  const std::string where = "127.0.0.1:" + std::to_string(port);
  // Ranks 2 and 3 of 4 are never started.
  auto r0 = start_rank(testing::rank_env(port, 0, 4, {{"BRAID_RENDEZVOUS_TIMEOUT_S", "4"}}));
  auto r1 = start_rank(testing::rank_env(port, 1, 4, {{"BRAID_RENDEZVOUS_TIMEOUT_S", "4"}}));
  for (auto* p : {r0.get(), r1.get()}) {
    EXPECT_NE(p->wait(kBound), 0) << p->output();
    const std::string out = p->output();
    EXPECT_NE(out.find("waiting for ranks 2, 3 at " + where + " - 2/4 joined, giving up in "), std::string::npos)
        << out;
    EXPECT_NE(out.find("BRAID_RENDEZVOUS_TIMEOUT_S"), std::string::npos) << out;
  }
  // The lines come before the end: at least two of them from the rank that waited longest.
  const std::string out0 = r0->output();
  const size_t first = out0.find("waiting for ranks");
  ASSERT_NE(first, std::string::npos) << out0;
  EXPECT_NE(out0.find("waiting for ranks", first + 1), std::string::npos) << out0;
}

TEST(RendezvousProgress, ARankThatComesAfterTheProgressLinesStillJoins) {
  const int port = testing::free_port();
  auto r0 = start_rank(testing::rank_env(port, 0, 2, {{"BRAID_RENDEZVOUS_TIMEOUT_S", "20"}}));
  // Rank 0 says it waits for rank 1 (20 s timeout: a line every 5 s)...
  const auto until = std::chrono::steady_clock::now() + kBound;
  while (r0->output().find("waiting for rank 1 at 127.0.0.1:" + std::to_string(port) + " - 1/2 joined") ==
         std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << r0->output();
    std::this_thread::sleep_for(50ms);
  }
  // ...and rank 1, started only now, joins it: waiting in slices loses nothing.
  auto r1 = start_rank(testing::rank_env(port, 1, 2, {{"BRAID_RENDEZVOUS_TIMEOUT_S", "20"}}));
  for (auto* p : {r0.get(), r1.get()}) {
    EXPECT_EQ(p->wait(kBound), 0) << p->output();
    EXPECT_NE(p->output().find("all_reduce sum = 3"), std::string::npos) << p->output();
  }
}

}  // namespace
}  // namespace braid
