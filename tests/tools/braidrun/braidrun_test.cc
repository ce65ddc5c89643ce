// End-to-end tests of the braidrun executable on one machine (127.0.0.1).
#include <signal.h>

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
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

TEST(Braidrun, Help) {
  RunResult r = run_braidrun({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.out, "--nproc-per-node")) << r.out;
}

// Each rank gets its own share of the CPUs (when there are enough), or all of them with none.
TEST(Braidrun, BindsRanksToTheirShareOfTheCpus) {
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (ncpu < 2) GTEST_SKIP() << "one CPU: nothing to share";
  RunResult r = run_braidrun({"--standalone", "--nproc-per-node", "2", "grep", "Cpus_allowed_list", "/proc/self/status"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string first_half = ncpu == 2 ? "0" : "0-" + std::to_string(ncpu / 2 - 1);
  EXPECT_TRUE(contains(r.out, "[rank 0] Cpus_allowed_list:\t" + first_half + "\n")) << r.out;
  EXPECT_FALSE(contains(r.out, "[rank 1] Cpus_allowed_list:\t" + first_half + "\n")) << r.out;
  r = run_braidrun({"--standalone", "--cpu-bind", "none", "--nproc-per-node", "2", "grep", "Cpus_allowed_list",
                    "/proc/self/status"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 1] Cpus_allowed_list:\t0-" + std::to_string(ncpu - 1) + "\n")) << r.out;
}

TEST(Braidrun, BadFlagsFailClearly) {
  RunResult r = run_braidrun({"--nnodes", "3:2", rank_helper_path()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "--nnodes 3:2: MIN is larger than MAX")) << r.err;
  r = run_braidrun({"--max_restarts=-1", rank_helper_path()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "--max-restarts '-1'")) << r.err;
  r = run_braidrun({"--standalone", "./no/such/program"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "./no/such/program")) << r.err;
  r = run_braidrun({"--standalone", "no-such-program-in-path-braidrun"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "cannot find program")) << r.err;
}

TEST(Braidrun, SetsEnvForEachRank) {
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "8", "--rdzv-id", "job42"}, {"env"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<int> ranks;
  std::set<std::string> ports, store_ports;
  // MASTER_PORT is left free for torch's own store (rank 0 serves it under env://, as with
  // torchrun's c10d rendezvous); braid's store is BRAID_STORE_PORT.
  std::regex re(R"(^\[rank (\d+)\] RANK=(\d+) LOCAL_RANK=(\d+) WORLD_SIZE=8 LOCAL_WORLD_SIZE=8 GROUP_RANK=0 )"
                R"(GROUP_WORLD_SIZE=1 ROLE_RANK=(\d+) ROLE_WORLD_SIZE=8 MASTER_ADDR=127\.0\.0\.1 MASTER_PORT=(\d+) )"
                R"(TORCHELASTIC_RUN_ID=job42 BRAID_AGENT_STORE=1 TORCHELASTIC_RESTART_COUNT=0 )"
                R"(TORCHELASTIC_MAX_RESTARTS=0 ROLE_NAME=default BRAID_STORE_PORT=(\d+) )"
                R"(TORCHELASTIC_USE_AGENT_STORE=False BRAID_JOB_ID=job42$)");
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, re)) << line;
    EXPECT_EQ(m[1], m[2]);
    EXPECT_EQ(m[2], m[3]);
    EXPECT_EQ(m[2], m[4]);
    EXPECT_NE(m[5], "0");
    EXPECT_NE(m[5], m[6]);
    ranks.insert(std::stoi(m[2]));
    ports.insert(m[5]);
    store_ports.insert(m[6]);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(ports.size(), 1u);
  EXPECT_EQ(store_ports.size(), 1u);
}

TEST(Braidrun, PrefixesLinesAndNeverSplitsThem) {
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc_per_node=4"},
                                       {"halves", "abcdefghijklmnop", "eprint", "to-stderr"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = lines_of(r.out);
  ASSERT_EQ(out.size(), 4u) << r.out;
  for (const std::string& line : out) EXPECT_TRUE(std::regex_match(line, std::regex(R"(\[rank [0-3]\] abcdefghijklmnop)"))) << line;
  int err_lines = 0;
  for (const std::string& line : lines_of(r.err)) err_lines += std::regex_match(line, std::regex(R"(\[rank [0-3]\] to-stderr)"));
  EXPECT_EQ(err_lines, 4) << r.err;
}

TEST(Braidrun, NoPrefixAndLogDir) {
  TempDir logs;
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "2", "--no-prefix", "--log-dir", logs.path() + "/l", "--"},
                                       {"print", "hello", "eprint", "warn"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines_of(r.out), (std::vector<std::string>{"hello", "hello"}));
  for (int i = 0; i < 2; ++i) {
    std::string log = read_file(logs.path() + "/l/rank" + std::to_string(i) + ".log");
    EXPECT_TRUE(contains(log, "hello\n")) << log;
    EXPECT_TRUE(contains(log, "warn\n")) << log;
  }
}

TEST(Braidrun, ExitCodePropagatesAndNamesTheRank) {
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "3"},
                                       {"print@1", "last-words-of-rank-1", "exit@1", "3", "sleep", "60"}),
                             40);
  ASSERT_FALSE(r.timed_out) << "the other ranks were not stopped";
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 (local rank 1 on node 0")) << r.err;
  EXPECT_TRUE(contains(r.err, "exit code 3")) << r.err;
  EXPECT_TRUE(contains(r.err, "last 1 line(s) of rank 1:\nbraidrun:   | last-words-of-rank-1\n")) << r.err;
}

// When a rank fails after others finished, braidrun says which had ended normally, so that a
// peer "closed normally" in the failed rank's error is told apart from one still running.
TEST(Braidrun, AFailureNamesTheRanksThatHadEndedNormally) {
  TempDir pids;
  // Rank 0 fails 0.5 s after every rank has started (rank 2 exits right after its pidfile).
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "3"},
                                       {"pidfile", pids.path(), "exit@2", "0", "await-pidfiles@0", pids.path(), "3",
                                        "sleep", "0.5", "exit@0", "4", "sleep", "60"}),
                             40);
  ASSERT_FALSE(r.timed_out) << "the other ranks were not stopped";
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 (local rank 0 on node 0")) << r.err;
  EXPECT_TRUE(contains(r.err, "; rank(s) 2 had already ended with exit code 0")) << r.err;
}

TEST(Braidrun, KilledRankGives137AndStopsTheOthers) {
  TempDir pids;
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "3"},
                                       {"pidfile", pids.path(), "await-pidfiles@0", pids.path(), "3", "kill@0", "9", "sleep", "60"}),
                             40);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 137) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0")) << r.err;
  EXPECT_TRUE(contains(r.err, "killed by SIGKILL")) << r.err;
  auto started = read_pidfiles(pids.path(), 3, 1);
  ASSERT_EQ(started.size(), 3u);
  EXPECT_TRUE(wait_pids_gone(started, 5).empty());
}

TEST(Braidrun, RankIgnoringSigtermIsKilledAfterGrace) {
  TempDir pids;
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "2", "--grace-s", "1"},
                                       {"ignore-term", "pidfile", pids.path(), "await-pidfiles@0", pids.path(), "2", "exit@0", "4",
                                        "sleep", "60"}),
                             40);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 (pid")) << r.err;
  EXPECT_TRUE(contains(r.err, "sending SIGKILL")) << r.err;
  auto started = read_pidfiles(pids.path(), 2, 1);
  ASSERT_EQ(started.size(), 2u);
  EXPECT_TRUE(wait_pids_gone(started, 5).empty());
}

void signal_braidrun_and_check_ranks_gone(int sig, int expected_exit) {
  TempDir pids;
  BraidrunProcess p(with_rank({"--standalone", "--nproc-per-node", "3", "--grace-s", "2"},
                              {"pidfile", pids.path(), "ignore-term@2", "sleep", "60"}));
  auto started = read_pidfiles(pids.path(), 3, 20);
  ASSERT_EQ(started.size(), 3u);
  ASSERT_EQ(kill(p.pid(), sig), 0);
  RunResult r = p.wait(30);
  ASSERT_FALSE(r.timed_out);
  if (expected_exit >= 0) {
    EXPECT_EQ(r.exit_code, expected_exit) << r.err;
  }
  std::vector<pid_t> alive = wait_pids_gone(started, 10);
  EXPECT_TRUE(alive.empty()) << alive.size() << " rank(s) outlived braidrun";
}

TEST(Braidrun, SigtermToBraidrunStopsEveryRank) { signal_braidrun_and_check_ranks_gone(SIGTERM, 128 + SIGTERM); }
TEST(Braidrun, SigintToBraidrunStopsEveryRank) { signal_braidrun_and_check_ranks_gone(SIGINT, 128 + SIGINT); }
TEST(Braidrun, SigkillOfBraidrunLeavesNoOrphans) { signal_braidrun_and_check_ranks_gone(SIGKILL, 128 + SIGKILL); }

TEST(Braidrun, RanksUseTheStoreAfterRank0Exited) {
  RunResult r = run_braidrun(with_rank({"--standalone", "--nproc-per-node", "3"},
                                       {"store-set@0", "greeting", "from-rank-0", "exit@0", "0", "sleep", "1",
                                        "store-get", "greeting"}),
                             40);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 1] got greeting=from-rank-0")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 2] got greeting=from-rank-0")) << r.out;
}

// --master-port names braid's store (where the nodes meet), which the ranks get as
// BRAID_STORE_PORT; MASTER_PORT is another port, free for torch's store.
TEST(Braidrun, MasterPortIsServedAsBraidsStore) {
  int port = free_port();
  RunResult r = run_braidrun(with_rank({"--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
                                        std::to_string(port)},
                                       {"env", "store-set@1", "k", "v", "store-get", "k"}),
                             40);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "BRAID_STORE_PORT=" + std::to_string(port) + " ")) << r.out;
  EXPECT_FALSE(contains(r.out, " MASTER_PORT=" + std::to_string(port) + " ")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 0] got k=v")) << r.out;
}

TEST(Braidrun, NodesMissingIsNamed) {
  int port = free_port();
  RunResult r = run_braidrun(with_rank({"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint",
                                        "127.0.0.1:" + std::to_string(port), "--rdzv-timeout-s", "1.5"},
                                       {"env"}),
                             40);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.err, "1 of 2 nodes arrived (node 0 (host ")) << r.err;
  EXPECT_TRUE(contains(r.err, "1 missing (node rank(s) 1)")) << r.err;
  EXPECT_TRUE(r.out.empty()) << "no rank may start: " << r.out;
}

std::vector<std::string> node_flags(int port, int nproc) {
  return {"--nnodes", "2", "--nproc-per-node", std::to_string(nproc), "--rdzv-endpoint",
          "127.0.0.1:" + std::to_string(port), "--rdzv-timeout-s", "30", "--rdzv-backend=c10d"};
}

// free_port() only found the port free a moment ago: a program beside the test (another test)
// that binds it without listening leaves neither node able to serve the store. Both nodes then
// say so ("could not serve it either"), and the pair runs again on another port.
TEST(Braidrun, TwoNodesOnOneHostFormOneJob) {
  const std::vector<std::string> actions = {"env", "store-set@3", "from3", "x", "store-get", "from3"};
  RunResult ra, rb;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int port = free_port();
    BraidrunProcess a(with_rank(node_flags(port, 2), actions));
    BraidrunProcess b(with_rank(node_flags(port, 2), actions));
    ra = a.wait(60);
    rb = b.wait(60);
    const std::string taken = "could not serve it either: store server cannot listen on 127.0.0.1:" +
                              std::to_string(port) + ": Address already in use";
    if (!(contains(ra.err, taken) && contains(rb.err, taken))) break;
  }
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  std::set<std::string> ranks;
  std::regex re(R"(\[rank (\d)\] RANK=(\d) LOCAL_RANK=(\d) WORLD_SIZE=4 .*GROUP_WORLD_SIZE=2 .*)");
  for (const std::string& line : lines_of(ra.out + rb.out)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) ranks.insert(m[2]);
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2", "3"})) << ra.out << rb.out;
  EXPECT_TRUE(contains(ra.out + rb.out, "[rank 0] got from3=x"));
}

// The endpoint's port held by a socket that serves nothing: no node can serve the store there,
// and the timeout says so instead of only "cannot reach".
TEST(Braidrun, AnEndpointPortHeldByAnotherProgramIsNamed) {
  int port = free_port();
  int holder = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);  // bound, not listening
  RunResult r = run_braidrun(with_rank({"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint",
                                        "127.0.0.1:" + std::to_string(port), "--rdzv-timeout-s", "1.5"},
                                       {"env"}),
                             40);
  close(holder);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.err, "cannot reach the job's store at 127.0.0.1:" + std::to_string(port))) << r.err;
  EXPECT_TRUE(contains(r.err, "this node could not serve it either")) << r.err;
  EXPECT_TRUE(r.out.empty()) << "no rank may start: " << r.out;
}

TEST(Braidrun, NodesMustAgreeOnNprocPerNode) {
  int port = free_port();
  BraidrunProcess a(with_rank(node_flags(port, 2), {"env"}));
  BraidrunProcess b(with_rank(node_flags(port, 1), {"env"}));
  RunResult ra = a.wait(60), rb = b.wait(60);
  EXPECT_NE(ra.exit_code, 0);
  EXPECT_NE(rb.exit_code, 0);
  EXPECT_TRUE(contains(ra.err + rb.err, "disagree on --nproc-per-node")) << ra.err << rb.err;
}

TEST(Braidrun, FailureOnOneNodeStopsTheOther) {
  int port = free_port();
  auto flags = node_flags(port, 2);
  flags.insert(flags.end(), {"--node-rank", "0"});
  BraidrunProcess a(with_rank(flags, {"sleep", "60"}));
  flags = node_flags(port, 2);
  flags.insert(flags.end(), {"--node-rank", "1"});
  BraidrunProcess b(with_rank(flags, {"sleep@3", "0.5", "exit@3", "5", "sleep", "60"}));
  RunResult rb = b.wait(45), ra = a.wait(45);
  ASSERT_FALSE(ra.timed_out);
  ASSERT_FALSE(rb.timed_out);
  EXPECT_EQ(rb.exit_code, 5) << rb.err;
  EXPECT_EQ(ra.exit_code, 5) << ra.err;
  EXPECT_TRUE(contains(ra.err, "node 1: rank 3 failed: exit code 5")) << ra.err;
}

}  // namespace
}  // namespace braid::braidrun::testing
