// Two braidruns in two network namespaces (two "hosts" joined by a veth pair) forming one job.
// Needs root for `ip netns`; skipped with a message otherwise.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/two_hosts.h"
#include "tests/tools/braidrun/braidrun_runner.h"

namespace braid::braidrun::testing {
namespace {

using ::braid::testing::TwoHosts;

TEST(BraidrunNetns, TwoNodesInTwoNamespacesFormOneJob) {
  TwoHosts hosts("brt", "10.77.0");
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  std::vector<std::string> args = {"--nnodes",        "2", "--nproc-per-node", "2", "--rdzv-endpoint", "10.77.0.1:29500",
                                   "--rdzv-timeout-s", "30", "--rdzv-id",      "netns-job", rank_helper_path(), "env",
                                   "store-set@3",     "k3", "hello-from-3",   "store-get", "k3"};
  RunResult ra, rb;
  {
    // The client first: it must wait for the serving node rather than fail.
    BraidrunProcess b(args, hosts.exec_in(1));
    usleep(300 * 1000);
    BraidrunProcess a(args, hosts.exec_in(0));
    ra = a.wait(60);
    rb = b.wait(60);
  }
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  // braid's store is the endpoint (BRAID_STORE_PORT); MASTER_PORT, node 0's port kept free for
  // torch's store, is the same on every node.
  std::regex re(R"(\[rank (\d)\] RANK=(\d) LOCAL_RANK=(\d) WORLD_SIZE=4 .* GROUP_WORLD_SIZE=2 .* MASTER_ADDR=10\.77\.0\.1 MASTER_PORT=(\d+) TORCHELASTIC_RUN_ID=netns-job .* BRAID_STORE_PORT=29500 .*)");
  std::set<std::string> ranks_a, ranks_b, torch_ports;
  for (const std::string& line : lines_of(ra.out)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) ranks_a.insert(m[2]), torch_ports.insert(m[4]);
  }
  for (const std::string& line : lines_of(rb.out)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) ranks_b.insert(m[2]), torch_ports.insert(m[4]);
  }
  EXPECT_EQ(torch_ports.size(), 1u) << ra.out << rb.out;
  EXPECT_EQ(torch_ports.count("29500"), 0u) << ra.out << rb.out;
  // The node that serves (it owns 10.77.0.1) is node 0.
  EXPECT_EQ(ranks_a, (std::set<std::string>{"0", "1"})) << ra.out << ra.err;
  EXPECT_EQ(ranks_b, (std::set<std::string>{"2", "3"})) << rb.out << rb.err;
  EXPECT_NE((ra.out + rb.out).find("[rank 0] got k3=hello-from-3"), std::string::npos) << ra.out << rb.out;
}

bool contains_text(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A secret file only this user can read, holding `secret`.
std::string write_secret(const TempDir& dir, const std::string& name, const std::string& secret) {
  std::string path = dir.path() + "/" + name;
  std::ofstream(path) << secret;
  chmod(path.c_str(), 0600);
  return path;
}

std::vector<std::string> with_env(std::vector<std::string> prefix, const std::string& kv) {
  prefix.push_back("env");
  prefix.push_back(kv);
  return prefix;
}

// braidrun with `args` on both hosts at once, each given the secret in `secret_file`; waits
// (at most a minute each) for both and returns host 0's result, then host 1's.
std::pair<RunResult, RunResult> run_both_nodes(const TwoHosts& hosts, const std::vector<std::string>& args,
                                               const std::string& secret_file) {
  BraidrunProcess a(args, with_env(hosts.exec_in(0), "BRAID_SECRET_FILE=" + secret_file));
  BraidrunProcess b(args, with_env(hosts.exec_in(1), "BRAID_SECRET_FILE=" + secret_file));
  RunResult ra = a.wait(60);
  RunResult rb = b.wait(60);
  return {ra, rb};
}

// braidruns on several nodes cannot invent a shared secret: they use the user's, and hand it on
// to their ranks unchanged.
TEST(BraidrunNetns, NodesUseTheUsersSecretAndPassItOn) {
  TwoHosts hosts("brt", "10.77.0");
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  TempDir dir;
  std::string file = write_secret(dir, "secret", "netns-users-secret-0123456789");
  std::vector<std::string> args = {"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint", "10.77.0.1:29501",
                                   "--rdzv-timeout-s", "30", rank_helper_path(), "secret", "store-set@1", "k", "v",
                                   "store-get", "k"};
  auto [ra, rb] = run_both_nodes(hosts, args, file);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  for (const RunResult* r : {&ra, &rb}) {
    EXPECT_NE(r->out.find("secret_file=" + file + " file_mode=600"), std::string::npos) << r->out;
    EXPECT_NE(r->out.find("got k=v"), std::string::npos) << r->out << r->err;
    EXPECT_EQ(r->err.find("has no secret"), std::string::npos) << r->err;
  }
}

TEST(BraidrunNetns, ANodeWithAnotherSecretIsRefusedAtOnce) {
  TwoHosts hosts("brt", "10.77.0");
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  TempDir dir;
  std::string mine = write_secret(dir, "mine", "netns-the-jobs-secret-0123456789");
  std::string other = write_secret(dir, "other", "netns-someone-elses-secret-98765");
  std::vector<std::string> args = {"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint", "10.77.0.1:29502",
                                   "--rdzv-timeout-s", "5", rank_helper_path(), "print", "ran"};
  RunResult ra, rb;
  {
    BraidrunProcess a(args, with_env(hosts.exec_in(0), "BRAID_SECRET_FILE=" + mine));
    usleep(300 * 1000);
    auto start = std::chrono::steady_clock::now();
    BraidrunProcess b(args, with_env(hosts.exec_in(1), "BRAID_SECRET_FILE=" + other));
    rb = b.wait(60);
    // Refused, not left to wait for the rendezvous timeout: a detection bound.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
    ra = a.wait(60);
  }
  EXPECT_NE(rb.exit_code, 0) << rb.err;
  EXPECT_NE(rb.err.find("10.77.0.1:29502"), std::string::npos) << rb.err;
  EXPECT_NE(rb.err.find("BRAID_SECRET_FILE"), std::string::npos) << rb.err;
  EXPECT_EQ(rb.out.find("ran"), std::string::npos) << rb.out;
  EXPECT_NE(ra.exit_code, 0) << "node 1 never joined: " << ra.err;
  EXPECT_EQ(ra.out.find("ran"), std::string::npos) << ra.out;
}

// --max-restarts across two hosts: the store of round 1 (a free port on the serving host's
// address) is reached from the other host, with the user's secret.
TEST(BraidrunNetns, TwoNodesInTwoNamespacesRestart) {
  TwoHosts hosts("brt", "10.77.0");
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  TempDir dir;
  std::string file = write_secret(dir, "secret", "netns-restart-secret-0123456789ab");
  std::vector<std::string> args = {"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", "10.77.0.1:29503",
                                   "--rdzv-timeout-s", "30", "--max-restarts", "1", "--rdzv-id", "netns-restart",
                                   rank_helper_path(), "exit@3#0", "5", "sleep#0", "30", "store-set@3#1", "k",
                                   "round-1", "store-get#1", "k"};
  auto [ra, rb] = run_both_nodes(hosts, args, file);
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE((ra.out + rb.out).find("[rank " + std::to_string(rank) + "] got k=round-1"), std::string::npos)
        << ra.out << rb.out << ra.err << rb.err;
  }
  EXPECT_NE(ra.err.find("round 0: rank 3 (local rank 1 on node 1, host "), std::string::npos) << ra.err;
}

// --nnodes 1:2 across two hosts: the whole of host 1's node (braidrun and ranks) is killed
// while round 0 runs; host 0 goes on alone in round 1 (ranks 0..1 of 2). With braid-perf, round
// 0 runs an all_reduce across both hosts first and round 1 one on host 0 alone, each checked.
TEST(BraidrunNetns, AKilledNodeIsLeftOutAndTheJobFinishesOnTheOtherHost) {
  TwoHosts hosts("brt", "10.77.0");
  if (!hosts.error().empty()) GTEST_SKIP() << hosts.error();
  TempDir pids;
  const char* perf = std::getenv("BRAID_PERF");
  const std::string perf_run = perf != nullptr && access(perf, X_OK) == 0
                                   ? "\"" + std::string(perf) + "\" --op all_reduce -b 1K -e 64K -n 3 -w 1 || exit $?; "
                                   : "";
  const std::string script = perf_run + "\"" + rank_helper_path() + "\" env pidfile#0 " + pids.path() + " sleep#0 30";
  const std::vector<std::string> args = {
      "--nnodes", "1:2", "--nproc-per-node", "2", "--rdzv-endpoint", "10.77.0.1:29504", "--rdzv-timeout-s", "20",
      "--max-restarts", "1", "--monitor-interval", "0.1", "--grace-s", "1", "--rdzv-conf",
      "last_call_timeout=1,keep_alive_interval=0.5,keep_alive_max_attempt=4", "--", "sh", "-c", script};
  BraidrunProcess a(args, hosts.exec_in(0));
  usleep(300 * 1000);
  auto b = std::make_unique<BraidrunProcess>(args, hosts.exec_in(1));
  auto ranks = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(ranks.size(), 4u) << a.out_so_far();
  kill(b->pid(), SIGKILL);
  kill(ranks[2], SIGKILL);
  kill(ranks[3], SIGKILL);
  RunResult ra = a.wait(60);
  ASSERT_FALSE(ra.timed_out) << ra.err;
  EXPECT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  EXPECT_TRUE(contains_text(ra.out, "[rank 0] RANK=0 LOCAL_RANK=0 WORLD_SIZE=4 ")) << ra.out;
  EXPECT_TRUE(contains_text(ra.out, "[rank 1] RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 "
                                    "GROUP_WORLD_SIZE=1 "))
      << ra.out;
  EXPECT_TRUE(contains_text(ra.err, ") lost in round 0: no heartbeat for ")) << ra.err;
  if (!perf_run.empty()) {
    EXPECT_TRUE(contains_text(ra.out, "[rank 0] # all_reduce, 4 ranks")) << ra.out;
    EXPECT_TRUE(contains_text(ra.out, "[rank 0] # all_reduce, 2 ranks")) << ra.out;
    size_t ok = 0;
    for (size_t at = 0; (at = ra.out.find("[rank 0] # Out of bounds values : 0 OK", at)) != std::string::npos; ++at) ++ok;
    EXPECT_EQ(ok, 2u) << "one checked all_reduce run per round: " << ra.out;
  }
}

}  // namespace
}  // namespace braid::braidrun::testing
