// braidrun --rdzv-backend etcd: two braidruns on 127.0.0.1 meet in a real 3-member etcd cluster
// and run a checked collective; the job survives the loss of an etcd member (and restarts
// through the others); node 0's braidrun lost with --node-rank and a fixed node count ends the
// job with a summary; without --node-rank, node 0 lost is survived: the next round's leader is
// another node (--nnodes 1:2, on one host and across two namespace hosts; a fixed --nnodes 2
// with a replacement braidrun; a leader frozen before it records its round's store); and with
// c10d, losing the store's node ends the job naming that node and etcd.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "tests/support/two_hosts.h"
#include "tests/tools/braidrun/braidrun_runner.h"
#include "tests/tools/braidrun/etcd_cluster.h"
#include "tools/braidrun/etcd_store.h"

namespace braid::braidrun::testing {
namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// `node_rank` < 0: no --node-rank (node ranks in arrival order, from etcd's counter).
std::vector<std::string> etcd_node_flags(const EtcdCluster& c, const std::string& run_id, int node_rank,
                                         const std::string& max_restarts, const std::string& rdzv_timeout_s = "30") {
  std::vector<std::string> flags = {"--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "etcd",
                                    "--rdzv-endpoint", c.endpoints(), "--rdzv-id", run_id, "--rdzv-timeout-s",
                                    rdzv_timeout_s, "--max-restarts", max_restarts, "--monitor-interval", "0.1",
                                    "--grace-s", "1"};
  if (node_rank >= 0) flags.insert(flags.end(), {"--node-rank", std::to_string(node_rank)});
  return flags;
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::unique_ptr<EtcdStore> etcd_client(const EtcdCluster& c) {
  return std::make_unique<EtcdStore>(*etcd::parse_endpoints(c.endpoints()));
}

class BraidrunEtcd : public ::testing::Test {
 protected:
  void SetUp() override {
    BRAID_SKIP_WITHOUT_ETCD();
    cluster_ = std::make_unique<EtcdCluster>();
    ASSERT_TRUE(cluster_->up()) << cluster_->error();
  }
  std::unique_ptr<EtcdCluster> cluster_;
};

TEST_F(BraidrunEtcd, TwoNodesRunACheckedAllReduce) {
  const char* perf = std::getenv("BRAID_PERF");
  if (perf == nullptr || access(perf, X_OK) != 0) GTEST_SKIP() << "braid-perf is not built (BRAID_PERF)";
  const std::vector<std::string> program = {"--", perf, "--op", "all_reduce", "-b", "1K", "-e", "256K", "-f", "8",
                                            "-n", "3", "-w", "1"};
  BraidrunProcess a(plus(etcd_node_flags(*cluster_, "checked", 0, "0"), program));
  BraidrunProcess b(plus(etcd_node_flags(*cluster_, "checked", 1, "0"), program));
  RunResult rb = b.wait(90), ra = a.wait(90);
  ASSERT_FALSE(ra.timed_out || rb.timed_out) << ra.err << rb.err;
  EXPECT_EQ(ra.exit_code, 0) << ra.out << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  EXPECT_TRUE(contains(ra.out, "[rank 0] # Out of bounds values : 0 OK")) << ra.out << ra.err;
  EXPECT_TRUE(contains(ra.out, "4 ranks")) << ra.out;
  EXPECT_TRUE(contains(ra.err, "node 0 of 2: starting ranks 0..1 of 4 (rendezvous in etcd " + cluster_->endpoints() +
                                   "; node 0 at 127.0.0.1, here"))
      << ra.err;
  EXPECT_TRUE(contains(rb.err, "node 1 of 2: starting ranks 2..3 of 4 (rendezvous in etcd ")) << rb.err;
  // A job that ended cleanly leaves nothing in etcd.
  EXPECT_EQ(etcd_client(*cluster_)->num_keys(), 0);
}

// The etcd member every braidrun asks first dies while the ranks run; a rank then fails, and the
// restart goes through the remaining members: round 1 runs and the job succeeds. The braidruns
// take their node ranks from etcd, in arrival order.
TEST_F(BraidrunEtcd, AnEtcdMemberLostTheJobRestartsThroughTheOthers) {
  TempDir pids;
  const std::vector<std::string> actions = {rank_helper_path(), "pidfile#0", pids.path(), "sleep#0", "30",
                                            "store-set@0#1", "k", "v1", "store-get#1", "k", "env"};
  BraidrunProcess a(plus(etcd_node_flags(*cluster_, "member-lost", -1, "1"), actions));
  BraidrunProcess b(plus(etcd_node_flags(*cluster_, "member-lost", -1, "1"), actions));
  auto started = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(started.size(), 4u) << a.out_so_far();
  cluster_->kill_member(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the braidruns ask etcd meanwhile
  ASSERT_EQ(kill(started[3], SIGKILL), 0);
  RunResult rb = b.wait(90), ra = a.wait(90);
  ASSERT_FALSE(ra.timed_out || rb.timed_out) << ra.err << rb.err;
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  for (const RunResult* r : {&ra, &rb}) {
    EXPECT_TRUE(contains(r->err, "round 0 failed; starting every rank again (restart 1 of 1)")) << r->err;
    EXPECT_TRUE(contains(r->err, "every rank succeeded in round 1")) << r->err;
    EXPECT_TRUE(contains(r->err, "round 0: rank 3 (local rank 1 on node 1, host ")) << r->err;
  }
  for (int rank : {0, 1, 2, 3}) {
    EXPECT_TRUE(contains(ra.out + rb.out, "[rank " + std::to_string(rank) + "] got k=v1")) << ra.out << rb.out;
  }
  EXPECT_TRUE(wait_pids_gone(started, 5).empty());
}

// Node 0's braidrun is killed: its ranks go with it, node 1's ranks lose the round's store and
// fail, and the restart cannot gather a fixed --nnodes 2: node 1 ends with every failure listed.
TEST_F(BraidrunEtcd, Node0LostWithAFixedNodeCountEndsTheJobWithASummary) {
  TempDir pids;
  const std::vector<std::string> actions = {rank_helper_path(), "pidfile", pids.path(), "store-get", "never-set"};
  BraidrunProcess a(plus(etcd_node_flags(*cluster_, "node0-lost", 0, "1", "10"), actions));
  BraidrunProcess b(plus(etcd_node_flags(*cluster_, "node0-lost", 1, "1", "10"), actions));
  auto started = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(started.size(), 4u) << a.out_so_far();
  ASSERT_EQ(kill(a.pid(), SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  RunResult rb = b.wait(60);
  ASSERT_FALSE(rb.timed_out) << rb.err;
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(50)) << rb.err;
  EXPECT_NE(rb.exit_code, 0) << rb.err;
  EXPECT_TRUE(contains(rb.err, "round 1 of job 'node0-lost'")) << rb.err;
  EXPECT_TRUE(contains(rb.err, "missing node rank(s) 0")) << rb.err;
  const std::regex summary(
      "braidrun: job failed after 1 restart\\(s\\) \\(--max-restarts 1\\); every failure:\n"
      "braidrun:   round 0: rank [23] \\(local rank [01] on node 1, host [^)]+\\): ");
  EXPECT_TRUE(std::regex_search(rb.err, summary)) << rb.err;
  EXPECT_TRUE(wait_pids_gone(started, 10).empty());
}

// A node's flags for --nnodes `range` in etcd: a node lost after 2 s of silence, a round
// waiting 1 s for more nodes once MIN are in.
std::vector<std::string> elastic_etcd_flags(const EtcdCluster& c, const std::string& run_id, const std::string& range,
                                            const std::string& max_restarts, const std::string& last_call = "1") {
  return {"--nnodes", range, "--nproc-per-node", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", c.endpoints(),
          "--rdzv-id", run_id, "--rdzv-timeout-s", "30", "--max-restarts", max_restarts, "--monitor-interval", "0.1",
          "--grace-s", "1", "--rdzv-conf",
          "last_call_timeout=" + last_call + ",keep_alive_interval=0.5,keep_alive_max_attempt=4"};
}

// The rank helper's "env" lines of round `round` of job `run_id` (BRAID_JOB_ID "<id>/round<R>"),
// by RANK: each a map of variable to value.
std::map<int, std::map<std::string, std::string>> round_env(const std::string& out, const std::string& run_id,
                                                            int round) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  static const std::regex field(R"(([A-Z_]+)=(\S*))");
  for (const std::string& line : lines_of(out)) {
    if (!contains(line, "] RANK=")) continue;
    std::map<std::string, std::string> e;
    for (std::sregex_iterator it(line.begin(), line.end(), field), end; it != end; ++it) e[(*it)[1]] = (*it)[2];
    if (e["BRAID_JOB_ID"] == run_id + "/round" + std::to_string(round)) by_rank[std::stoi(e["RANK"])] = e;
  }
  return by_rank;
}

// The ranks' script for the node-loss cases: round 0 prints its variables, writes its pidfile
// and waits; the next round prints them, meets in the round's store (rank 0 sets a key every
// rank reads) and, with braid-perf built, runs an all_reduce that braid-perf checks.
std::vector<std::string> node_loss_script(const std::string& pids, int next_round_restarts) {
  const char* perf = std::getenv("BRAID_PERF");
  const bool with_perf = perf != nullptr && access(perf, X_OK) == 0;
  const std::string next = std::to_string(next_round_restarts);
  return {"--", "sh", "-c",
          "\"" + rank_helper_path() + "\" env pidfile#0 " + pids + " sleep#0 30 store-set@0#" + next + " k v1 store-get#" +
              next + " k || exit $?; " +
              (with_perf ? "if [ \"$TORCHELASTIC_RESTART_COUNT\" = " + next + " ]; then \"" + std::string(perf) +
                               "\" --op all_reduce -b 1K -e 64K -f 8 -n 3 -w 1 || exit $?; fi"
                         : "")};
}

// etcd hands out node ids in arrival order, and on a loaded machine the braidrun started second
// may arrive first: node 0 is whichever prints rank 0's line. Swaps the two so that `a` is node
// 0; says whether it swapped, or nothing when neither printed it within `timeout_s`.
std::optional<bool> put_node0_first(std::unique_ptr<BraidrunProcess>& a, std::unique_ptr<BraidrunProcess>& b,
                                    double timeout_s = 10) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    if (contains(a->out_so_far(), "[rank 0] RANK=0")) return false;
    if (contains(b->out_so_far(), "[rank 0] RANK=0")) {
      std::swap(a, b);
      return true;
    }
    if (std::chrono::steady_clock::now() > until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// --nnodes 1:2 in etcd: node 0 (the first braidrun, which led round 0 and would have served the
// c10d store) is killed with its ranks while round 0 runs. Node 1 finds it lost, ends round 0 (a
// failure: one restart), opens round 1 alone and leads it: its ranks are 0..1 of 2, GROUP_RANK 0,
// MASTER_ADDR its own, the round's store its own; they meet there and run a checked all_reduce,
// and node 1 exits 0, removing the job's keys (node 0 counts as gone once found lost).
TEST_F(BraidrunEtcd, ElasticNode0LostTheJobFinishesOnTheOtherNode) {
  TempDir pids;
  const auto flags = plus(elastic_etcd_flags(*cluster_, "elastic-node0", "1:2", "1"), node_loss_script(pids.path(), 1));
  auto a = std::make_unique<BraidrunProcess>(flags);
  usleep(300 * 1000);  // usually this one takes node id 0 (put_node0_first checks)
  auto b = std::make_unique<BraidrunProcess>(flags);
  auto ranks = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(ranks.size(), 4u) << a->out_so_far() << b->out_so_far();
  ASSERT_TRUE(put_node0_first(a, b).has_value()) << "no braidrun says it is node 0: " << a->out_so_far() << b->out_so_far();
  const pid_t node0 = a->pid();
  kill(node0, SIGKILL);
  kill(ranks[0], SIGKILL);
  kill(ranks[1], SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  RunResult rb = b->wait(60);
  ASSERT_FALSE(rb.timed_out) << rb.out << rb.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  // The keep-alive (2 s), the grace, the last call (1 s) and the start: well within 30 s.
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, std::chrono::seconds(30)) << rb.err;
  EXPECT_TRUE(contains(rb.err, "node 0 (host ")) << rb.err;
  EXPECT_TRUE(contains(rb.err, ") lost in round 0: no heartbeat for ")) << rb.err;
  EXPECT_TRUE(contains(rb.err, "round 1: node 1 is node 0 of 1 (--nnodes 1:2): starting ranks 0..1 of 2 (round "
                               "leader node 1 (here) at 127.0.0.1: the ranks' store on port "))
      << rb.err;
  auto round0 = round_env(rb.out, "elastic-node0", 0), round1 = round_env(rb.out, "elastic-node0", 1);
  ASSERT_EQ(round0.size(), 2u) << rb.out;
  ASSERT_EQ(round1.size(), 2u) << rb.out;
  EXPECT_EQ(round0.at(2).at("GROUP_RANK"), "1");
  for (const auto& [rank, e] : round1) {
    EXPECT_LT(rank, 2);
    EXPECT_EQ(e.at("WORLD_SIZE"), "2");
    EXPECT_EQ(e.at("GROUP_RANK"), "0");
    EXPECT_EQ(e.at("GROUP_WORLD_SIZE"), "1");
    EXPECT_EQ(e.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(e.at("TORCHELASTIC_RESTART_COUNT"), "1");
    // Not round 0's store or MASTER_PORT: node 1's own.
    EXPECT_NE(e.at("BRAID_STORE_PORT"), round0.at(2).at("BRAID_STORE_PORT"));
  }
  EXPECT_TRUE(contains(rb.out, "[rank 0] got k=v1")) << rb.out;
  EXPECT_TRUE(contains(rb.out, "[rank 1] got k=v1")) << rb.out;
  const char* perf = std::getenv("BRAID_PERF");
  if (perf != nullptr && access(perf, X_OK) == 0) {  // braid-perf's rank 0 reports every rank's check
    EXPECT_TRUE(contains(rb.out, "[rank 0] # Out of bounds values : 0 OK")) << rb.out << rb.err;
    EXPECT_TRUE(contains(rb.out, "[rank 0] # all_reduce, 2 ranks")) << rb.out;
  }
  EXPECT_TRUE(contains(rb.err, "every rank succeeded in round 1, after 1 restart(s)")) << rb.err;
  EXPECT_EQ(etcd_client(*cluster_)->num_keys(), 0) << "the last node to leave removes the job's keys";
  EXPECT_TRUE(wait_pids_gone(ranks, 5).empty());
}

// Waits (up to `timeout_s`) until `p`'s stderr holds `text`.
bool wait_for_err(const BraidrunProcess& p, const std::string& text, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!contains(p.err_so_far(), text)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// The leader lost between a round's closing and its record: --nnodes 1:3 with two nodes and a
// last call of 3 s. A rank of round 0 is killed; both nodes join round 1, and while its last call
// runs node 0's braidrun is frozen (SIGSTOP). Node 1 closes round 1 with both, so node 0 leads
// it, but never records its store: node 1 finds it lost, round 1 fails before any rank started
// (a restart), and node 1 leads round 2 alone and finishes the job.
TEST_F(BraidrunEtcd, ElasticLeaderLostBeforeItOpensTheRoundsStore) {
  TempDir pids;
  const auto flags =
      plus(elastic_etcd_flags(*cluster_, "leader-frozen", "1:3", "2", "3"), node_loss_script(pids.path(), 2));
  auto a = std::make_unique<BraidrunProcess>(flags);
  usleep(300 * 1000);  // usually this one takes node id 0 (put_node0_first checks)
  auto b = std::make_unique<BraidrunProcess>(flags);
  auto ranks = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(ranks.size(), 4u) << a->out_so_far() << b->out_so_far();
  ASSERT_TRUE(put_node0_first(a, b).has_value()) << "no braidrun says it is node 0: " << a->out_so_far() << b->out_so_far();
  kill(ranks[2], SIGKILL);
  ASSERT_TRUE(wait_for_err(*a, "round 0 failed; starting every rank again", 20)) << a->err_so_far();
  usleep(1000 * 1000);  // node 0 joined round 1; its last call (3 s) runs
  ASSERT_EQ(kill(a->pid(), SIGSTOP), 0);
  RunResult rb = b->wait(60);
  kill(a->pid(), SIGKILL);
  ASSERT_FALSE(rb.timed_out) << rb.out << rb.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  EXPECT_TRUE(contains(rb.err, ") lost in round 1: no heartbeat for ")) << rb.err;
  EXPECT_TRUE(contains(rb.err, "round 1 failed before its ranks started; node 1 meets the others in the next round"))
      << rb.err;
  EXPECT_TRUE(contains(rb.err, "round 2: node 1 is node 0 of 1 (--nnodes 1:3): starting ranks 0..1 of 2 (round "
                               "leader node 1 (here)"))
      << rb.err;
  EXPECT_EQ(round_env(rb.out, "leader-frozen", 1).size(), 0u) << "no rank of round 1 started: " << rb.out;
  auto round2 = round_env(rb.out, "leader-frozen", 2);
  ASSERT_EQ(round2.size(), 2u) << rb.out;
  for (const auto& [rank, e] : round2) EXPECT_EQ(e.at("TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_TRUE(contains(rb.out, "[rank 0] got k=v1") && contains(rb.out, "[rank 1] got k=v1")) << rb.out;
  EXPECT_TRUE(contains(rb.err, "every rank succeeded in round 2, after 2 restart(s)")) << rb.err;
  a->wait(10);
  EXPECT_TRUE(wait_pids_gone(ranks, 5).empty());
}

// A fixed --nnodes 2 in etcd without --node-rank forms its rounds as 2:2 (torchrun's way): node 0
// is killed with its ranks, node 1 finds it lost and waits in round 1 for a second node, and a
// replacement braidrun started for the lost node joins round 1 under a new node id (2). Node 1,
// the lowest id, leads round 1: ranks 0..1 and the round's store are its; the replacement's are
// 2..3. All four meet in that store and run a checked all_reduce; both exit 0.
TEST_F(BraidrunEtcd, FixedNodeCountNode0LostAReplacementJoinsTheNextRound) {
  TempDir pids;
  const auto flags = plus(elastic_etcd_flags(*cluster_, "fixed-node0", "2", "1"), node_loss_script(pids.path(), 1));
  auto a = std::make_unique<BraidrunProcess>(flags);
  usleep(300 * 1000);  // usually this one takes node id 0 (put_node0_first checks)
  auto b = std::make_unique<BraidrunProcess>(flags);
  auto ranks = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(ranks.size(), 4u) << a->out_so_far() << b->out_so_far();
  ASSERT_TRUE(put_node0_first(a, b).has_value()) << "no braidrun says it is node 0: " << a->out_so_far() << b->out_so_far();
  kill(a->pid(), SIGKILL);
  kill(ranks[0], SIGKILL);
  kill(ranks[1], SIGKILL);
  BraidrunProcess c(flags);  // the replacement
  RunResult rb = b->wait(90), rc = c.wait(90);
  ASSERT_FALSE(rb.timed_out || rc.timed_out) << rb.err << rc.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.out << rb.err;
  EXPECT_EQ(rc.exit_code, 0) << rc.out << rc.err;
  EXPECT_TRUE(contains(rb.err, ") lost in round 0: no heartbeat for ")) << rb.err;
  EXPECT_TRUE(contains(rb.err, "round 1: node 1 is node 0 of 2 (--nnodes 2:2): starting ranks 0..1 of 4 (round "
                               "leader node 1 (here) at 127.0.0.1"))
      << rb.err;
  EXPECT_TRUE(contains(rc.err, "round 1: node 2 is node 1 of 2 (--nnodes 2:2): starting ranks 2..3 of 4 (round "
                               "leader node 1 at 127.0.0.1"))
      << rc.err;
  auto on_b = round_env(rb.out, "fixed-node0", 1), on_c = round_env(rc.out, "fixed-node0", 1);
  ASSERT_EQ(on_b.size(), 2u) << rb.out;
  ASSERT_EQ(on_c.size(), 2u) << rc.out;
  for (auto* by_rank : {&on_b, &on_c}) {
    for (const auto& [rank, e] : *by_rank) {
      EXPECT_EQ(e.at("GROUP_RANK"), rank < 2 ? "0" : "1");
      EXPECT_EQ(e.at("WORLD_SIZE"), "4");
      EXPECT_EQ(e.at("TORCHELASTIC_RESTART_COUNT"), "1");
      EXPECT_EQ(e.at("BRAID_STORE_PORT"), on_b.begin()->second.at("BRAID_STORE_PORT"));
      EXPECT_EQ(e.at("MASTER_PORT"), on_b.begin()->second.at("MASTER_PORT"));
    }
  }
  EXPECT_TRUE(on_b.count(0) && on_b.count(1) && on_c.count(2) && on_c.count(3)) << rb.out << rc.out;
  for (int rank : {0, 1, 2, 3}) {
    EXPECT_TRUE(contains(rb.out + rc.out, "[rank " + std::to_string(rank) + "] got k=v1")) << rb.out << rc.out;
  }
  const char* perf = std::getenv("BRAID_PERF");
  if (perf != nullptr && access(perf, X_OK) == 0) {
    EXPECT_TRUE(contains(rb.out, "[rank 0] # Out of bounds values : 0 OK")) << rb.out << rb.err;
    EXPECT_TRUE(contains(rb.out, "[rank 0] # all_reduce, 4 ranks")) << rb.out;
  }
  // Both summaries list round 0's loss: neither node removed the job's keys while the other
  // still read them.
  for (const RunResult* r : {&rb, &rc}) {
    EXPECT_TRUE(contains(r->err, "every rank succeeded in round 1, after 1 restart(s) (--max-restarts 1); earlier "
                                 "failures:\nbraidrun:   round 0: node 0 (host "))
        << r->err;
  }
  EXPECT_EQ(etcd_client(*cluster_)->num_keys(), 0) << "the last node to leave removes the job's keys";
  EXPECT_TRUE(wait_pids_gone(ranks, 5).empty());
}

// Two hosts (network namespaces) and a 3-member etcd cluster across them: member 0 on host 0,
// members 1 and 2 on host 1.
class BraidrunEtcdNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    BRAID_SKIP_WITHOUT_ETCD();
    hosts_ = std::make_unique<::braid::testing::TwoHosts>("bre", "10.81.0");
    if (!hosts_->error().empty()) GTEST_SKIP() << hosts_->error();
    cluster_ = std::make_unique<EtcdCluster>(
        30, std::vector<EtcdPlace>{{hosts_->ns(0), hosts_->address(0)},
                                   {hosts_->ns(1), hosts_->address(1)},
                                   {hosts_->ns(1), hosts_->address(1)}});
    ASSERT_TRUE(cluster_->up()) << cluster_->error();
  }
  std::unique_ptr<::braid::testing::TwoHosts> hosts_;
  std::unique_ptr<EtcdCluster> cluster_;  // stopped before the hosts go
};

// Two hosts (network namespaces): etcd member 0 on host 0, members 1 and 2 on host 1; node 0 is
// host 1's braidrun, so the ranks' MASTER_ADDR must be host 1's address as seen on the way to
// etcd. Member 0 (the one every braidrun asks first) is killed, then a rank: the job restarts
// through host 1's members and succeeds.
TEST_F(BraidrunEtcdNetns, TwoHostsMeetInEtcdAndOutliveAMember) {
  TempDir pids;
  const std::vector<std::string> actions = {rank_helper_path(), "env", "pidfile#0", pids.path(), "sleep#0", "30",
                                            "store-set@0#1", "k", "v1", "store-get#1", "k"};
  BraidrunProcess node0(plus(etcd_node_flags(*cluster_, "netns", 0, "1"), actions), hosts_->exec_in(1));
  BraidrunProcess node1(plus(etcd_node_flags(*cluster_, "netns", 1, "1"), actions), hosts_->exec_in(0));
  auto started = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(started.size(), 4u) << node0.out_so_far();
  cluster_->kill_member(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(kill(started[3], SIGKILL), 0);
  RunResult r1 = node1.wait(90), r0 = node0.wait(90);
  ASSERT_FALSE(r0.timed_out || r1.timed_out) << r0.err << r1.err;
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  const std::string out = r0.out + r1.out;
  std::regex master_addr(R"(MASTER_ADDR=(\S+))");
  int lines = 0;
  for (std::sregex_iterator it(out.begin(), out.end(), master_addr), end; it != end; ++it, ++lines) {
    EXPECT_EQ((*it)[1], hosts_->address(1)) << out;
  }
  EXPECT_EQ(lines, 8) << "4 ranks, 2 rounds: " << out;
  for (int rank : {0, 1, 2, 3}) {
    EXPECT_TRUE(contains(out, "[rank " + std::to_string(rank) + "] got k=v1")) << out << r0.err << r1.err;
  }
  EXPECT_TRUE(contains(r1.err, "round 0 failed; starting every rank again (restart 1 of 1)")) << r1.err;
  EXPECT_TRUE(wait_pids_gone(started, 5).empty());
}

// Two hosts (network namespaces), --nnodes 1:2: etcd member 0 on host 0, members 1 and 2 on host
// 1. Node 0 (usually the braidrun on host 1, started first) leads round 0 (MASTER_ADDR its host's
// address); it is killed with its ranks. Node 1, on the other host, leads round 1 alone:
// MASTER_ADDR is then that host's address, and its ranks meet in its store and finish the job.
TEST_F(BraidrunEtcdNetns, ElasticNode0LostOnOneHostTheOtherHostLeadsTheNextRound) {
  TempDir pids;
  const auto flags = plus(elastic_etcd_flags(*cluster_, "netns-elastic", "1:2", "1"), node_loss_script(pids.path(), 1));
  auto node0 = std::make_unique<BraidrunProcess>(flags, hosts_->exec_in(1));
  usleep(300 * 1000);  // usually this one takes node id 0 (put_node0_first checks)
  auto node1 = std::make_unique<BraidrunProcess>(flags, hosts_->exec_in(0));
  auto ranks = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(ranks.size(), 4u) << node0->out_so_far() << node1->out_so_far();
  const std::optional<bool> swapped = put_node0_first(node0, node1);
  ASSERT_TRUE(swapped.has_value()) << "no braidrun says it is node 0: " << node0->out_so_far() << node1->out_so_far();
  const int node0_host = *swapped ? 0 : 1, node1_host = 1 - node0_host;
  kill(node0->pid(), SIGKILL);
  kill(ranks[0], SIGKILL);
  kill(ranks[1], SIGKILL);
  RunResult r1 = node1->wait(60);
  ASSERT_FALSE(r1.timed_out) << r1.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.out << r1.err;
  auto round0 = round_env(r1.out, "netns-elastic", 0), round1 = round_env(r1.out, "netns-elastic", 1);
  ASSERT_EQ(round0.size(), 2u) << r1.out;
  ASSERT_EQ(round1.size(), 2u) << r1.out;
  for (const auto& [rank, e] : round0) EXPECT_EQ(e.at("MASTER_ADDR"), hosts_->address(node0_host)) << r1.out;
  for (const auto& [rank, e] : round1) {
    EXPECT_EQ(e.at("MASTER_ADDR"), hosts_->address(node1_host)) << r1.out;
    EXPECT_EQ(e.at("GROUP_RANK"), "0");
    EXPECT_EQ(e.at("WORLD_SIZE"), "2");
  }
  EXPECT_TRUE(contains(r1.out, "[rank 0] got k=v1") && contains(r1.out, "[rank 1] got k=v1")) << r1.out << r1.err;
  EXPECT_TRUE(contains(r1.err, "every rank succeeded in round 1, after 1 restart(s)")) << r1.err;
  EXPECT_TRUE(wait_pids_gone(ranks, 5).empty());
}

// One node through etcd, without --rdzv-id: it runs, says to give each job its own id, and
// leaves nothing behind.
TEST_F(BraidrunEtcd, OneNodeWithoutARunIdRunsAndIsToldToGiveOne) {
  RunResult r = run_braidrun({"--nproc-per-node", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", cluster_->endpoints(),
                              "--rdzv-timeout-s", "30", rank_helper_path(), "store-set@1", "k", "v", "store-get", "k"},
                             60);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "give each job its own --rdzv-id")) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] got k=v")) << r.out;
  EXPECT_EQ(etcd_client(*cluster_)->num_keys(), 0);
}

// Keys of an earlier job with the same --rdzv-id stay in etcd when it did not end cleanly: the
// new job says so and how to remove them.
TEST_F(BraidrunEtcd, AnEarlierJobsKeysAreNamedWithHowToRemoveThem) {
  etcd_client(*cluster_)->set("braidrun/stale/node/0", "otherhost\n4242\n1\n0");
  RunResult r = run_braidrun({"--rdzv-backend", "etcd", "--rdzv-endpoint", cluster_->endpoints(), "--rdzv-id", "stale",
                              "--rdzv-timeout-s", "10", rank_helper_path(), "print", "ran"},
                             30);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "is already taken by node 0 (host otherhost, braidrun pid 4242)")) << r.err;
  EXPECT_TRUE(contains(r.err, "etcdctl del --prefix braidrun/stale/")) << r.err;
  EXPECT_FALSE(contains(r.out, "ran")) << r.out;
}

// With c10d, node 0's braidrun serves the job's store: when it dies, node 1 ends the job at
// once, naming the store, its node, and the backend that would have outlived it.
TEST(BraidrunC10dStoreLost, TheOtherNodeEndsNamingTheStoresNodeAndEtcd) {
  TempDir pids;
  const int port = free_port();
  auto flags = [&](int node) {
    return std::vector<std::string>{"--nnodes", "2", "--nproc-per-node", "2", "--node-rank", std::to_string(node),
                                    "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--rdzv-timeout-s", "30",
                                    "--monitor-interval", "0.1", "--grace-s", "1", rank_helper_path(), "pidfile",
                                    pids.path(), "sleep", "30"};
  };
  BraidrunProcess a(flags(0));
  BraidrunProcess b(flags(1));
  auto started = read_pidfiles(pids.path(), 4, 30);
  ASSERT_EQ(started.size(), 4u) << a.out_so_far();
  const pid_t store_pid = a.pid();
  ASSERT_EQ(kill(store_pid, SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  RunResult rb = b.wait(40);
  ASSERT_FALSE(rb.timed_out) << rb.err;
  EXPECT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(20)) << rb.err;
  EXPECT_EQ(rb.exit_code, 1) << rb.err;
  EXPECT_TRUE(contains(rb.err, "The job's store at 127.0.0.1:" + std::to_string(port) + " was served by node 0 (host "))
      << rb.err;
  EXPECT_TRUE(contains(rb.err, "braidrun pid " + std::to_string(store_pid) + "), which is gone")) << rb.err;
  EXPECT_TRUE(contains(rb.err, "--rdzv-backend etcd --rdzv-endpoint")) << rb.err;
  EXPECT_TRUE(wait_pids_gone(started, 10).empty());
}

}  // namespace
}  // namespace braid::braidrun::testing
