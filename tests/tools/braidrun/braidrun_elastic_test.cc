// braidrun --nnodes MIN:MAX: a node killed with its ranks (kill -9) is left out of the next
// round and the job goes on with the others, ranks renumbered; a node arriving while a round
// runs joins at the next one without spending a restart; below MIN nodes the round never starts
// and the error names the nodes missing. Real braidrun processes on 127.0.0.1, one per "node",
// the rank helper (and braid-perf, when built) as ranks; short keep-alive (2 s) and last-call
// times.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/tools/braidrun/braidrun_runner.h"

namespace braid::braidrun::testing {
namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A node's flags: --nnodes `range` on 127.0.0.1:`port`, a node lost after 2 s of silence, a
// round waiting `last_call` s for more nodes once MIN are in.
std::vector<std::string> node_flags(int port, const std::string& range, const std::string& max_restarts,
                                    const std::string& last_call = "1", const std::string& rdzv_timeout = "20") {
  return {"--nnodes",        range,
          "--nproc-per-node", "2",
          "--rdzv-endpoint",  "127.0.0.1:" + std::to_string(port),
          "--rdzv-timeout-s", rdzv_timeout,
          "--max-restarts",   max_restarts,
          "--monitor-interval", "0.1",
          "--grace-s",        "1",
          "--rdzv-conf",      "last_call_timeout=" + last_call + ",keep_alive_interval=0.5,keep_alive_max_attempt=4"};
}

std::vector<std::string> with_rank(std::vector<std::string> flags, const std::vector<std::string>& actions) {
  flags.push_back(rank_helper_path());
  flags.insert(flags.end(), actions.begin(), actions.end());
  return flags;
}

// One "env" line of the rank helper, by variable.
using EnvLine = std::map<std::string, std::string>;

// Every "env" line in `out` of round `round` (BRAID_JOB_ID ".../round<R>"), by RANK.
std::map<int, EnvLine> round_env(const std::string& out, int round) {
  std::map<int, EnvLine> by_rank;
  static const std::regex field(R"(([A-Z_]+)=(\S*))");
  for (const std::string& line : lines_of(out)) {
    if (!contains(line, "] RANK=")) continue;
    EnvLine e;
    for (std::sregex_iterator it(line.begin(), line.end(), field), end; it != end; ++it) e[(*it)[1]] = (*it)[2];
    if (e["BRAID_JOB_ID"] == "none/round" + std::to_string(round)) by_rank[std::stoi(e["RANK"])] = e;
  }
  return by_rank;
}

// Waits (up to `timeout_s`) until `p`'s stdout holds `text`.
bool wait_for_output(const BraidrunProcess& p, const std::string& text, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!contains(p.out_so_far(), text)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// kill -9 of a whole node: its braidrun and its ranks (pids from their pidfiles).
void kill_node(pid_t braidrun, const std::vector<pid_t>& ranks) {
  kill(braidrun, SIGKILL);
  for (pid_t r : ranks) kill(r, SIGKILL);
}

// Two nodes of one job with --nnodes 1:2; node 1 (the one not serving the store) is killed with
// its ranks while round 0 runs. Node 0 notices the silence, ends round 0 (a failure: one restart
// spent) and starts round 1 alone after the last call: ranks 0..1 of a world of 2, which finish
// the job (with braid-perf: an all_reduce checked against its expected values).
TEST(BraidrunElastic, AKilledNodeIsLeftOutAndTheJobFinishesOnTheOther) {
  TempDir pids;
  const int port = free_port();
  const char* perf = std::getenv("BRAID_PERF");
  const bool with_perf = perf != nullptr && access(perf, X_OK) == 0;
  // Round 0: print, write pidfiles, wait; round 1: print, then a real collective when braid-perf
  // is built.
  const std::string script =
      "\"" + rank_helper_path() + "\" env pidfile#0 " + pids.path() + " sleep#0 30 || exit $?; " +
      (with_perf ? "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 1 ]; then \"" + std::string(perf) +
                       "\" --op all_reduce -b 1K -e 1K -n 3 -w 1 || exit $?; fi"
                 : "");
  auto flags = node_flags(port, "1:2", "1");
  flags.insert(flags.end(), {"--", "sh", "-c", script});
  auto a = std::make_unique<BraidrunProcess>(flags);
  usleep(300 * 1000);  // so that this one serves the store
  auto b = std::make_unique<BraidrunProcess>(flags);
  auto ranks = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(ranks.size(), 4u);
  ASSERT_TRUE(wait_for_output(*b, "[rank 2] RANK=2", 10)) << "node 1 is not the second braidrun";
  kill_node(b->pid(), {ranks[2], ranks[3]});
  const auto killed_at = std::chrono::steady_clock::now();
  RunResult ra = a->wait(60);
  ASSERT_FALSE(ra.timed_out) << ra.err;
  EXPECT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  // Bounded: the keep-alive (2 s), the grace, the last call (1 s) and the start, well within 20 s.
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, std::chrono::seconds(20));
  auto round0 = round_env(ra.out, 0), round1 = round_env(ra.out, 1);
  ASSERT_EQ(round0.size(), 2u) << ra.out;
  ASSERT_EQ(round1.size(), 2u) << ra.out;
  for (const auto& [rank, e] : round1) {
    EXPECT_LT(rank, 2);
    EXPECT_EQ(e.at("WORLD_SIZE"), "2");
    EXPECT_EQ(e.at("GROUP_RANK"), "0");
    EXPECT_EQ(e.at("GROUP_WORLD_SIZE"), "1");
    EXPECT_EQ(e.at("ROLE_WORLD_SIZE"), "2");
    EXPECT_EQ(e.at("TORCHELASTIC_RESTART_COUNT"), "1");
  }
  EXPECT_EQ(round0.at(0).at("WORLD_SIZE"), "4");
  EXPECT_TRUE(contains(ra.err, "node 1 (host ")) << ra.err;
  EXPECT_TRUE(contains(ra.err, ") lost in round 0: no heartbeat for ")) << ra.err;
  EXPECT_TRUE(contains(ra.err, "round 1: node 0 is node 0 of 1 (--nnodes 1:2)")) << ra.err;
  if (with_perf) {  // braid-perf's rank 0 reports the check of every rank's results
    EXPECT_TRUE(contains(ra.out, "[rank 0] # Out of bounds values : 0 OK")) << ra.out << ra.err;
    EXPECT_TRUE(contains(ra.out, "[rank 0] # all_reduce, 2 ranks")) << ra.out;
  }
  EXPECT_TRUE(wait_pids_gone(ranks, 5).empty());
}

// Three nodes with --nnodes 2:3; the middle one (ranks 2..3) is killed: in round 1 the third
// node's ranks are 2..3 (they were 4..5), GROUP_RANK 1 of 2.
TEST(BraidrunElastic, RanksAreRenumberedContiguouslyAfterANodeIsLost) {
  TempDir pids;
  const int port = free_port();
  const auto flags = with_rank(node_flags(port, "2:3", "1", "2"), {"env", "pidfile#0", pids.path(), "sleep#0", "30"});
  std::vector<std::unique_ptr<BraidrunProcess>> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(std::make_unique<BraidrunProcess>(flags));
    usleep(300 * 1000);
  }
  auto ranks = read_pidfiles(pids.path(), 6, 30);
  ASSERT_EQ(ranks.size(), 6u);
  // The node of ranks 2..3, and the one of ranks 4..5 (arrival order decides which is which).
  int middle = -1, last = -1;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(wait_for_output(*nodes[i], "RANK=", 10));
    if (contains(nodes[i]->out_so_far(), "[rank 2] RANK=2")) middle = i;
    if (contains(nodes[i]->out_so_far(), "[rank 4] RANK=4")) last = i;
  }
  ASSERT_TRUE(middle >= 0 && last >= 0);
  kill_node(nodes[middle]->pid(), {ranks[2], ranks[3]});
  std::vector<RunResult> results(3);
  for (int i = 0; i < 3; ++i) {
    if (i != middle) results[i] = nodes[i]->wait(60);
  }
  for (int i = 0; i < 3; ++i) {
    if (i == middle) continue;
    ASSERT_FALSE(results[i].timed_out) << results[i].err;
    EXPECT_EQ(results[i].exit_code, 0) << results[i].err;
  }
  auto round0 = round_env(results[last].out, 0), round1 = round_env(results[last].out, 1);
  ASSERT_EQ(round0.size(), 2u) << results[last].out;
  EXPECT_EQ(round0.count(4), 1u);
  EXPECT_EQ(round0.at(4).at("WORLD_SIZE"), "6");
  ASSERT_EQ(round1.size(), 2u) << results[last].out << results[last].err;
  for (int rank : {2, 3}) {
    ASSERT_EQ(round1.count(rank), 1u) << results[last].out;
    EXPECT_EQ(round1.at(rank).at("LOCAL_RANK"), std::to_string(rank - 2));
    EXPECT_EQ(round1.at(rank).at("GROUP_RANK"), "1");
    EXPECT_EQ(round1.at(rank).at("GROUP_WORLD_SIZE"), "2");
    EXPECT_EQ(round1.at(rank).at("WORLD_SIZE"), "4");
  }
}

// A node arriving while a round runs with room for it: the running node ends the round (a
// membership change: TORCHELASTIC_RESTART_COUNT stays 0, and --max-restarts 0 is enough) and
// the next round has both, ranks 0..3. A process of round 0 can reach neither round 0's store
// (closed) nor round 1's (another job id).
TEST(BraidrunElastic, ANodeArrivingLaterJoinsAtTheNextRound) {
  TempDir pids, stale;
  const int port = free_port();
  // Round 0 (a world of 2) runs until it is ended; round 1 (a world of 4) ends at once.
  const auto flags = with_rank(node_flags(port, "1:2", "0", "0.5"),
                               {"env", "stale-check@0", stale.path(), "pidfile~2", pids.path(), "sleep~2", "30"});
  BraidrunProcess a(flags);
  ASSERT_EQ(read_pidfiles(pids.path(), 2, 30).size(), 2u) << "round 0 did not start with one node";
  BraidrunProcess b(flags);
  RunResult ra = a.wait(60), rb = b.wait(60);
  ASSERT_FALSE(ra.timed_out || rb.timed_out) << ra.err << rb.err;
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  auto round0 = round_env(ra.out + rb.out, 0), round1 = round_env(ra.out + rb.out, 1);
  ASSERT_EQ(round0.size(), 2u) << ra.out << rb.out;
  ASSERT_EQ(round1.size(), 4u) << ra.out << rb.out;
  for (const auto& [rank, e] : round0) EXPECT_EQ(e.at("WORLD_SIZE"), "2");
  for (const auto& [rank, e] : round1) {
    EXPECT_EQ(e.at("WORLD_SIZE"), "4");
    EXPECT_EQ(e.at("GROUP_RANK"), std::to_string(rank / 2));
    EXPECT_EQ(e.at("GROUP_WORLD_SIZE"), "2");
    EXPECT_EQ(e.at("TORCHELASTIC_RESTART_COUNT"), "0");
  }
  EXPECT_TRUE(contains(rb.out, "[rank 2] RANK=2")) << rb.out;
  EXPECT_TRUE(contains(ra.err, "round 0 ended for a membership change")) << ra.err;
  EXPECT_TRUE(contains(ra.err, "(not counted as a restart)")) << ra.err;
  EXPECT_TRUE(contains(rb.err, "round 0 runs with node(s) 0; node 1 joins the next round")) << rb.err;
  EXPECT_FALSE(contains(ra.err + rb.err, "job failed")) << ra.err << rb.err;
  EXPECT_TRUE(contains(ra.out, "[rank 0] stale old-port-differs=yes old-store=gone new-store=refused\n"))
      << ra.out << ra.err;
}

// A node joining after a restart takes up the job's restart count: in the round it joins, its
// ranks see the same TORCHELASTIC_RESTART_COUNT as node 0's.
TEST(BraidrunElastic, ANodeJoiningLateTakesUpTheRestartCount) {
  TempDir pids;
  const int port = free_port();
  // Round 0: rank 1 fails. Round 1 (restart 1, a world of 2): runs until ended. Round 2 (a world
  // of 4): prints and ends.
  const auto flags = with_rank(node_flags(port, "1:2", "2", "0.5"), {"env", "exit@1#0", "3", "sleep#0", "30",
                                                                       "pidfile~2", pids.path(), "sleep~2", "30"});
  BraidrunProcess a(flags);
  ASSERT_EQ(read_pidfiles(pids.path(), 2, 30).size(), 2u) << "round 1 did not start";
  BraidrunProcess b(flags);
  RunResult ra = a.wait(60), rb = b.wait(60);
  ASSERT_FALSE(ra.timed_out || rb.timed_out) << ra.err << rb.err;
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  auto round2 = round_env(ra.out + rb.out, 2);
  ASSERT_EQ(round2.size(), 4u) << ra.out << rb.out << ra.err << rb.err;
  for (const auto& [rank, e] : round2) EXPECT_EQ(e.at("TORCHELASTIC_RESTART_COUNT"), "1") << "rank " << rank;
  EXPECT_TRUE(contains(ra.err, "every rank succeeded in round 2, after 1 restart(s)")) << ra.err;
}

// A node stopping its ranks for longer than the keep-alive (a rank ignores SIGTERM; --grace-s 3
// against a keep-alive of 2 s) still beats: the others do not take it for lost, and the round's
// failure is its rank's.
TEST(BraidrunElastic, ANodeStoppingItsRanksIsNotTakenForLost) {
  const int port = free_port();
  auto flags = node_flags(port, "1:2", "1");
  flags.insert(flags.end(), {"--grace-s", "3"});
  flags = with_rank(flags, {"env", "ignore-term@3#0", "store-set@3#0", "ready", "1", "store-get@2#0", "ready",
                            "exit@2#0", "3", "sleep#0", "30"});
  BraidrunProcess a(flags);
  usleep(300 * 1000);
  BraidrunProcess b(flags);
  RunResult ra = a.wait(60), rb = b.wait(60);
  ASSERT_FALSE(ra.timed_out || rb.timed_out) << ra.err << rb.err;
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_TRUE(contains(rb.err, "still running after the grace period; sending SIGKILL")) << rb.err;
  EXPECT_TRUE(contains(ra.err, "round 0: rank 2 (local rank 0 on node 1, host ")) << ra.err;
  EXPECT_FALSE(contains(ra.err + rb.err, " lost in round 0")) << ra.err << rb.err;
  EXPECT_EQ(round_env(ra.out + rb.out, 1).size(), 4u) << ra.out << rb.out;
}

// A third node for --nnodes 1:2 finds no round with room: it gives up after --rdzv-timeout-s
// saying so, and the job goes on (it restarts later without being told the job ended).
TEST(BraidrunElastic, ANodeFindingNoPlaceGivesUpWithoutEndingTheJob) {
  TempDir pids;
  const int port = free_port();
  const auto flags = with_rank(node_flags(port, "1:2", "1", "1"), {"env", "pidfile#0", pids.path(), "sleep#0", "4",
                                                                     "exit@1#0", "3"});
  BraidrunProcess a(flags);
  usleep(300 * 1000);
  BraidrunProcess b(flags);
  ASSERT_EQ(read_pidfiles(pids.path(), 4, 30).size(), 4u);
  auto third = node_flags(port, "1:2", "1", "1", "1.5");
  BraidrunProcess c(with_rank(third, {"print", "ran"}));
  RunResult rc = c.wait(30);
  RunResult ra = a.wait(60), rb = b.wait(60);
  ASSERT_FALSE(ra.timed_out || rb.timed_out || rc.timed_out) << ra.err << rb.err << rc.err;
  EXPECT_NE(rc.exit_code, 0) << rc.err;
  EXPECT_TRUE(contains(rc.err, "node 2 found no place in job 'none' within 1.5")) << rc.err;
  EXPECT_TRUE(contains(rc.err, "round 0 has node(s) 0, 1 (--nnodes MAX 2)")) << rc.err;
  EXPECT_FALSE(contains(rc.out, "ran")) << rc.out;
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(round_env(ra.out + rb.out, 1).size(), 4u) << ra.out << rb.out << ra.err;
}

// --nnodes 2:3 with two nodes, one killed: round 1 cannot reach MIN, and the error (within
// --rdzv-timeout-s) names the node that did not come back.
TEST(BraidrunElastic, BelowMinNodesTheErrorNamesTheMissingNode) {
  TempDir pids;
  const int port = free_port();
  const auto flags =
      with_rank(node_flags(port, "2:3", "2", "0.5", "3"), {"pidfile#0", pids.path(), "sleep#0", "30"});
  BraidrunProcess a(flags);
  usleep(300 * 1000);
  auto b = std::make_unique<BraidrunProcess>(flags);
  auto ranks = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(ranks.size(), 4u);
  const pid_t b_pid = b->pid();
  kill_node(b_pid, {ranks[2], ranks[3]});
  RunResult ra = a.wait(60);
  ASSERT_FALSE(ra.timed_out) << ra.err;
  EXPECT_NE(ra.exit_code, 0) << ra.err;
  EXPECT_TRUE(contains(ra.err, "round 1 of job 'none' at 127.0.0.1:" + std::to_string(port) + " did not start within"))
      << ra.err;
  EXPECT_TRUE(contains(ra.err, "fewer than --nnodes MIN 2")) << ra.err;
  EXPECT_TRUE(contains(ra.err, "nodes of the previous round missing: node 1 (host ")) << ra.err;
  EXPECT_TRUE(contains(ra.err, "braidrun pid " + std::to_string(b_pid) + ")")) << ra.err;
  EXPECT_TRUE(contains(ra.err, "job failed after 1 restart(s)")) << ra.err;
}

}  // namespace
}  // namespace braid::braidrun::testing
