// braidrun --max-restarts: a failed rank ends the round on every node, every rank starts again
// with torchrun's variables of the next round, a process of an earlier round cannot join a
// later one, and once restarts run out braidrun exits non-zero with every failure listed.
// Real braidrun processes on 127.0.0.1 (two of them for two nodes), the rank helper as ranks.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/tools/braidrun/braidrun_runner.h"

namespace braid::braidrun::testing {
namespace {

std::vector<std::string> with_rank(std::vector<std::string> flags, const std::vector<std::string>& actions) {
  flags.push_back(rank_helper_path());
  flags.insert(flags.end(), actions.begin(), actions.end());
  return flags;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// One "env" line of the rank helper, by variable.
using EnvLine = std::map<std::string, std::string>;

// Every "env" line in `out`, in order.
std::vector<EnvLine> env_lines(const std::string& out) {
  std::vector<EnvLine> lines;
  static const std::regex field(R"(([A-Z_]+)=(\S*))");
  for (const std::string& line : lines_of(out)) {
    if (!contains(line, "] RANK=")) continue;
    EnvLine e;
    for (std::sregex_iterator it(line.begin(), line.end(), field), end; it != end; ++it) e[(*it)[1]] = (*it)[2];
    lines.push_back(e);
  }
  return lines;
}

// The env lines of round `round`, by RANK.
std::map<int, EnvLine> round_env(const std::vector<EnvLine>& lines, int round) {
  std::map<int, EnvLine> out;
  for (const EnvLine& e : lines) {
    if (e.at("TORCHELASTIC_RESTART_COUNT") == std::to_string(round)) out[std::stoi(e.at("RANK"))] = e;
  }
  return out;
}

TEST(BraidrunRestart, AFailedRankRestartsEveryRankWithTorchrunsVariables) {
  TempDir logs;
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "2", "--max-restarts", "2", "--rdzv-id",
                                        "job7", "--log-dir", logs.path()},
                                       // Rank 1 fails in round 0 once rank 0 printed.
                                       {"env", "store-set@0#0", "printed", "1", "store-get@1#0", "printed", "exit@1#0",
                                        "3", "sleep#0", "30"}),
                             40);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto lines = env_lines(r.out);
  auto round0 = round_env(lines, 0), round1 = round_env(lines, 1);
  ASSERT_EQ(round0.size(), 2u) << r.out;
  ASSERT_EQ(round1.size(), 2u) << r.out;
  EXPECT_TRUE(round_env(lines, 2).empty()) << "round 1 succeeded: no round 2 " << r.out;
  for (int round : {0, 1}) {
    for (const auto& [rank, e] : round == 0 ? round0 : round1) {
      EXPECT_EQ(e.at("LOCAL_RANK"), std::to_string(rank));
      EXPECT_EQ(e.at("WORLD_SIZE"), "2");
      EXPECT_EQ(e.at("LOCAL_WORLD_SIZE"), "2");
      EXPECT_EQ(e.at("GROUP_RANK"), "0");
      EXPECT_EQ(e.at("GROUP_WORLD_SIZE"), "1");
      EXPECT_EQ(e.at("ROLE_RANK"), std::to_string(rank));
      EXPECT_EQ(e.at("ROLE_WORLD_SIZE"), "2");
      EXPECT_EQ(e.at("ROLE_NAME"), "default");
      EXPECT_EQ(e.at("TORCHELASTIC_RUN_ID"), "job7");
      EXPECT_EQ(e.at("TORCHELASTIC_MAX_RESTARTS"), "2");
      EXPECT_EQ(e.at("BRAID_JOB_ID"), "job7/round" + std::to_string(round));
    }
  }
  // Each round's ranks share a store of the round's own, and a port for torch's.
  for (const char* port : {"BRAID_STORE_PORT", "MASTER_PORT"}) {
    EXPECT_EQ(round0[0].at(port), round0[1].at(port)) << port;
    EXPECT_EQ(round1[0].at(port), round1[1].at(port)) << port;
    EXPECT_NE(round0[0].at(port), round1[0].at(port)) << port;
  }
  EXPECT_NE(round0[0].at("MASTER_PORT"), round0[0].at("BRAID_STORE_PORT"));
  EXPECT_TRUE(contains(r.err, "round 0 failed; starting every rank again (restart 1 of 2)")) << r.err;
  EXPECT_TRUE(contains(r.err, "every rank succeeded in round 1, after 1 restart(s) (--max-restarts 2)")) << r.err;
  EXPECT_TRUE(contains(r.err, "braidrun:   round 0: rank 1 (local rank 1 on node 0, host ")) << r.err;
  EXPECT_TRUE(contains(r.err, "): exit code 3\n")) << r.err;
  // Each round's output in its own log files.
  for (int rank : {0, 1}) {
    const std::string log0 = read_file(logs.path() + "/rank" + std::to_string(rank) + ".log");
    const std::string log1 = read_file(logs.path() + "/rank" + std::to_string(rank) + ".round1.log");
    EXPECT_TRUE(contains(log0, "TORCHELASTIC_RESTART_COUNT=0 ")) << log0;
    EXPECT_FALSE(contains(log0, "TORCHELASTIC_RESTART_COUNT=1 ")) << log0;
    EXPECT_TRUE(contains(log1, "TORCHELASTIC_RESTART_COUNT=1 ")) << log1;
  }
}

TEST(BraidrunRestart, RestartsRunningOutListEveryFailureAndExitNonZero) {
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "3", "--max-restarts", "2"},
                                       {"exit@1#0", "3", "kill@2#1", "9", "exit@0#2", "7", "sleep", "30"}),
                             40);
  ASSERT_FALSE(r.timed_out) << "the other ranks were not stopped: " << r.err;
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(contains(r.err, "restart 1 of 2")) << r.err;
  EXPECT_TRUE(contains(r.err, "restart 2 of 2")) << r.err;
  EXPECT_FALSE(contains(r.err, "restart 3 of 2")) << r.err;
  const std::regex summary(
      "braidrun: job failed after 2 restart\\(s\\) \\(--max-restarts 2\\); every failure:\n"
      "braidrun:   round 0: rank 1 \\(local rank 1 on node 0, host [^)]+\\): exit code 3\n"
      "braidrun:   round 1: rank 2 \\(local rank 2 on node 0, host [^)]+\\): killed by SIGKILL \\(signal 9\\)\n"
      "braidrun:   round 2: rank 0 \\(local rank 0 on node 0, host [^)]+\\): exit code 7\n");
  EXPECT_TRUE(std::regex_search(r.err, summary)) << r.err;
}

// A rank that ignores SIGTERM is SIGKILLed after --grace-s, and only then does the next round start.
TEST(BraidrunRestart, ARankIgnoringSigtermIsKilledAfterTheGraceBeforeTheRestart) {
  TempDir pids;
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--grace-s", "1"},
                                       {"ignore-term@1#0", "pidfile#0", pids.path(), "store-set@1#0", "ready", "1",
                                        "store-get@0#0", "ready", "exit@0#0", "4", "sleep#0", "30", "print", "ran"}),
                             40);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t killed = r.err.find("rank 1 (pid");
  const size_t restarted = r.err.find("starting every rank again");
  ASSERT_NE(killed, std::string::npos) << r.err;
  EXPECT_TRUE(contains(r.err, "still running after the grace period; sending SIGKILL")) << r.err;
  EXPECT_LT(killed, restarted) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] ran")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 1] ran")) << r.out;
  auto started = read_pidfiles(pids.path(), 2, 1);
  ASSERT_EQ(started.size(), 2u);
  EXPECT_TRUE(wait_pids_gone(started, 5).empty());
}

// What a process of round 0 knows (its BRAID_STORE_PORT and BRAID_JOB_ID) gets it nowhere in round 1:
// its store is closed, and the store of round 1 refuses its job id.
TEST(BraidrunRestart, AProcessOfAnEarlierRoundCannotJoinTheNewOne) {
  TempDir dir;
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1"},
                                       // Rank 0 fails once rank 1 kept what it knows of round 0.
                                       {"stale-check", dir.path(), "store-set@1#0", "kept", "1", "store-get@0#0", "kept",
                                        "exit@0#0", "3", "sleep#0", "30"}),
                             40);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (int rank : {0, 1}) {
    EXPECT_TRUE(contains(r.out, "[rank " + std::to_string(rank) +
                                    "] stale old-port-differs=yes old-store=gone new-store=refused\n"))
        << r.out << r.err;
  }
}

TEST(BraidrunRestart, SigtermToBraidrunEndsTheJobWithoutARestart) {
  TempDir pids;
  BraidrunProcess p(with_rank({"--standalone", "--nproc-per-node", "2", "--max-restarts", "3", "--grace-s", "1"},
                              {"pidfile", pids.path(), "sleep", "30"}));
  auto started = read_pidfiles(pids.path(), 2, 20);
  ASSERT_EQ(started.size(), 2u);
  ASSERT_EQ(kill(p.pid(), SIGTERM), 0);
  RunResult r = p.wait(30);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_FALSE(contains(r.err, "starting every rank again")) << r.err;
  EXPECT_TRUE(wait_pids_gone(started, 5).empty());
}

std::vector<std::string> node_flags(int port, const std::string& max_restarts) {
  return {"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port),
          "--rdzv-timeout-s", "30", "--max-restarts", max_restarts, "--monitor-interval", "0.1"};
}

struct TwoNodes {
  RunResult a, b;  // the serving node (node 0) first when both started
};

// Two braidruns of one job on 127.0.0.1; again on another port when free_port()'s port was
// taken meanwhile (see braidrun_test.cc, TwoNodesOnOneHostFormOneJob).
TwoNodes run_two_nodes(const std::string& max_restarts, const std::vector<std::string>& actions) {
  TwoNodes t;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = free_port();
    BraidrunProcess a(with_rank(node_flags(port, max_restarts), actions));
    BraidrunProcess b(with_rank(node_flags(port, max_restarts), actions));
    t.a = a.wait(60);
    t.b = b.wait(60);
    if (!(contains(t.a.err, "could not serve it either") && contains(t.b.err, "could not serve it either"))) break;
  }
  if (contains(t.b.err, ", served here")) std::swap(t.a, t.b);
  return t;
}

// Node 0's ranks end well at once; a rank of node 1 fails later: node 0 runs its ranks again too.
TEST(BraidrunRestart, TwoNodesRestartTogether) {
  // Rank 3 fails once every other rank printed (and they end at once).
  TwoNodes t = run_two_nodes("1", {"env", "store-set@0#0", "e0", "1", "store-set@1#0", "e1", "1", "store-set@2#0", "e2",
                                   "1", "store-get@3#0", "e0", "store-get@3#0", "e1", "store-get@3#0", "e2",
                                   "sleep@3#0", "0.5", "exit@3#0", "5"});
  ASSERT_FALSE(t.a.timed_out || t.b.timed_out) << t.a.err << t.b.err;
  EXPECT_EQ(t.a.exit_code, 0) << t.a.err;
  EXPECT_EQ(t.b.exit_code, 0) << t.b.err;
  auto lines = env_lines(t.a.out + t.b.out);
  for (int round : {0, 1}) {
    auto env = round_env(lines, round);
    ASSERT_EQ(env.size(), 4u) << "round " << round << ": " << t.a.out << t.b.out;
    std::set<std::string> ports, torch_ports;
    for (const auto& [rank, e] : env) {
      EXPECT_EQ(e.at("LOCAL_RANK"), std::to_string(rank % 2));
      EXPECT_EQ(e.at("GROUP_RANK"), std::to_string(rank / 2));
      EXPECT_EQ(e.at("GROUP_WORLD_SIZE"), "2");
      EXPECT_EQ(e.at("WORLD_SIZE"), "4");
      EXPECT_EQ(e.at("LOCAL_WORLD_SIZE"), "2");
      EXPECT_EQ(e.at("ROLE_RANK"), std::to_string(rank));
      EXPECT_EQ(e.at("ROLE_WORLD_SIZE"), "4");
      EXPECT_EQ(e.at("TORCHELASTIC_MAX_RESTARTS"), "1");
      EXPECT_EQ(e.at("BRAID_JOB_ID"), "none/round" + std::to_string(round));
      ports.insert(e.at("BRAID_STORE_PORT"));
      torch_ports.insert(e.at("MASTER_PORT"));
    }
    EXPECT_EQ(ports.size(), 1u) << "every node's ranks share the round's store";
    EXPECT_EQ(torch_ports.size(), 1u) << "every node's ranks get node 0's MASTER_PORT";
  }
  EXPECT_NE(round_env(lines, 0)[0].at("BRAID_STORE_PORT"), round_env(lines, 1)[0].at("BRAID_STORE_PORT"));
  for (const RunResult* r : {&t.a, &t.b}) {
    EXPECT_TRUE(contains(r->err, "round 0 failed; starting every rank again (restart 1 of 1)")) << r->err;
    EXPECT_TRUE(contains(r->err, "braidrun:   round 0: rank 3 (local rank 1 on node 1, host ")) << r->err;
  }
}

TEST(BraidrunRestart, TwoNodesRunOutOfRestarts) {
  TwoNodes t = run_two_nodes("1", {"sleep@3", "0.3", "exit@3", "5", "sleep", "30"});
  ASSERT_FALSE(t.a.timed_out || t.b.timed_out) << t.a.err << t.b.err;
  EXPECT_EQ(t.a.exit_code, 5) << t.a.err;
  EXPECT_EQ(t.b.exit_code, 5) << t.b.err;
  // The serving node waits for the other to leave, so it lists both rounds' failures.
  const std::regex summary(
      "braidrun: job failed after 1 restart\\(s\\) \\(--max-restarts 1\\); every failure:\n"
      "braidrun:   round 0: rank 3 \\(local rank 1 on node 1, host [^)]+\\): exit code 5\n"
      "braidrun:   round 1: rank 3 \\(local rank 1 on node 1, host [^)]+\\): exit code 5\n");
  EXPECT_TRUE(std::regex_search(t.a.err, summary)) << t.a.err;
  EXPECT_TRUE(contains(t.b.err, "job failed after 1 restart(s)")) << t.b.err;
}

// Ranks that built a braid communicator in round 0 build one again in round 1: the new round's
// store knows nothing of round 0's ranks (a shared store would refuse a second claim of each
// rank, "two processes claim RANK=1").
TEST(BraidrunRestart, RestartedRanksBuildCommunicatorsAgain) {
  const char* perf = std::getenv("BRAID_PERF");
  if (perf == nullptr || access(perf, X_OK) != 0) GTEST_SKIP() << "braid-perf is not built (BRAID_PERF)";
  const std::string script = std::string("\"") + perf + "\" --op all_reduce -b 1K -e 1K -n 3 -w 1 || exit $?; " +
                             "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && [ \"$RANK\" = 1 ]; then exit 3; fi";
  RunResult r = run_braidrun({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--", "sh", "-c", script},
                             60);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  size_t runs = 0;
  for (size_t at = 0; (at = r.out.find("[rank 0] # Out of bounds values : 0 OK", at)) != std::string::npos; ++at) ++runs;
  EXPECT_EQ(runs, 2u) << "one all_reduce run per round: " << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "round 0: rank 1 (local rank 1 on node 0, host ")) << r.err;
}

// In the last round too, a node whose ranks all succeeded learns that a rank of the other node
// failed, and exits with its code and the summary.
TEST(BraidrunRestart, ANodeWhoseRanksSucceededExitsWithTheJobsFailure) {
  const int port = free_port();
  // Ranks 2 and 3 (node 1) end well at once; rank 0 fails once they have started.
  const std::vector<std::string> actions = {"store-set@2", "e2", "1", "store-set@3", "e3", "1", "store-get@0", "e2",
                                            "store-get@0", "e3", "sleep@0", "0.3", "exit@0", "6", "sleep@1", "30"};
  auto flags = node_flags(port, "1");
  flags.insert(flags.end(), {"--node-rank", "0"});
  BraidrunProcess a(with_rank(flags, actions));
  flags = node_flags(port, "1");
  flags.insert(flags.end(), {"--node-rank", "1"});
  BraidrunProcess b(with_rank(flags, actions));
  RunResult rb = b.wait(60), ra = a.wait(60);
  ASSERT_FALSE(ra.timed_out || rb.timed_out) << ra.err << rb.err;
  EXPECT_EQ(ra.exit_code, 6) << ra.err;
  EXPECT_EQ(rb.exit_code, 6) << rb.err;
  for (const RunResult* r : {&ra, &rb}) {
    EXPECT_TRUE(contains(r->err, "job failed after 1 restart(s)")) << r->err;
    EXPECT_TRUE(contains(r->err, "round 1: rank 0 (local rank 0 on node 0, host ")) << r->err;
  }
}

// SIGTERM to one node's braidrun ends the job on both nodes, without a restart.
TEST(BraidrunRestart, SigtermToOneNodeEndsTheJobOnBoth) {
  TempDir pids;
  const int port = free_port();
  auto flags = node_flags(port, "3");
  flags.insert(flags.end(), {"--node-rank", "0", "--grace-s", "1"});
  BraidrunProcess a(with_rank(flags, {"pidfile", pids.path(), "sleep", "30"}));
  flags = node_flags(port, "3");
  flags.insert(flags.end(), {"--node-rank", "1", "--grace-s", "1"});
  BraidrunProcess b(with_rank(flags, {"pidfile", pids.path(), "sleep", "30"}));
  auto started = read_pidfiles(pids.path(), 4, 20);
  ASSERT_EQ(started.size(), 4u);
  ASSERT_EQ(kill(b.pid(), SIGTERM), 0);
  RunResult rb = b.wait(30), ra = a.wait(30);
  ASSERT_FALSE(ra.timed_out || rb.timed_out) << ra.err << rb.err;
  EXPECT_EQ(rb.exit_code, 128 + SIGTERM) << rb.err;
  EXPECT_EQ(ra.exit_code, 128 + SIGTERM) << ra.err;
  EXPECT_FALSE(contains(ra.err + rb.err, "starting every rank again")) << ra.err << rb.err;
  EXPECT_TRUE(contains(ra.err, "node 1: braidrun received SIGTERM")) << ra.err;
  EXPECT_TRUE(wait_pids_gone(started, 5).empty());
}

}  // namespace
}  // namespace braid::braidrun::testing
