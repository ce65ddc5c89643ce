#include "tools/braidrun/launch_options.h"
#include "tools/braidrun/rank_process.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace braid::braidrun {
namespace {

Result<LaunchOptions> parse(std::vector<std::string> args) { return parse_launch_options(args, 300); }

LaunchOptions parse_ok(std::vector<std::string> args) {
  Result<LaunchOptions> r = parse(args);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r.value() : LaunchOptions{};
}

std::string parse_error(std::vector<std::string> args) {
  Result<LaunchOptions> r = parse(args);
  EXPECT_FALSE(r.is_ok());
  return r.is_ok() ? "" : r.status().message();
}

TEST(LaunchOptions, Defaults) {
  LaunchOptions o = parse_ok({"./prog"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_FALSE(o.node_rank.has_value());
  EXPECT_EQ(o.endpoint_host, "127.0.0.1");
  EXPECT_EQ(o.endpoint_port, 29500);
  EXPECT_TRUE(o.prefix_output);
  EXPECT_EQ(o.grace_s, 5);
  EXPECT_EQ(o.rdzv_timeout_s, 300);
  EXPECT_EQ(o.run_id, "none");
  EXPECT_EQ(o.program, std::vector<std::string>{"./prog"});
}

TEST(LaunchOptions, BothSpellingsAndBothValueForms) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--nproc-per-node", "4", "--node-rank", "1", "--nnodes", "2", "p"},
           {"--nproc_per_node", "4", "--node_rank", "1", "--nnodes", "2", "p"},
           {"--nproc-per-node=4", "--node_rank=1", "--nnodes=2", "p"},
           {"--nproc_per_node=4", "--node-rank=1", "--nnodes=2:2", "p"}}) {
    LaunchOptions o = parse_ok(args);
    EXPECT_EQ(o.nproc_per_node, 4);
    EXPECT_EQ(o.nnodes, 2);
    ASSERT_TRUE(o.node_rank.has_value());
    EXPECT_EQ(*o.node_rank, 1);
  }
}

TEST(LaunchOptions, ProgramArgumentsAreNotParsed) {
  LaunchOptions o = parse_ok({"--nproc-per-node", "2", "./prog", "--nnodes", "9", "-x"});
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.program, (std::vector<std::string>{"./prog", "--nnodes", "9", "-x"}));
  o = parse_ok({"--no-prefix", "--", "--weird-name", "a"});
  EXPECT_FALSE(o.prefix_output);
  EXPECT_EQ(o.program, (std::vector<std::string>{"--weird-name", "a"}));
}

TEST(LaunchOptions, MasterAddrAndPort) {
  LaunchOptions o = parse_ok({"--master-addr", "10.1.2.3", "--master_port=1234", "p"});
  EXPECT_EQ(o.endpoint_host, "10.1.2.3");
  EXPECT_EQ(o.endpoint_port, 1234);
}

TEST(LaunchOptions, RdzvEndpointWinsOverMaster) {
  LaunchOptions o = parse_ok({"--master-addr", "a", "--rdzv-endpoint", "node0:777", "--rdzv-backend", "c10d",
                              "--rdzv-id", "job7", "p"});
  EXPECT_EQ(o.endpoint_host, "node0");
  EXPECT_EQ(o.endpoint_port, 777);
  EXPECT_EQ(o.run_id, "job7");
  o = parse_ok({"--rdzv_endpoint=node0", "p"});
  EXPECT_EQ(o.endpoint_port, 29400);
  o = parse_ok({"--rdzv-endpoint", "[::1]:99", "p"});
  EXPECT_EQ(o.endpoint_host, "::1");
  EXPECT_EQ(o.endpoint_port, 99);
}

TEST(LaunchOptions, Standalone) {
  LaunchOptions o = parse_ok({"--standalone", "--nproc-per-node", "3", "p"});
  EXPECT_TRUE(o.standalone);
  EXPECT_EQ(o.endpoint_host, "127.0.0.1");
  EXPECT_EQ(o.endpoint_port, 0);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_NE(parse_error({"--standalone", "--nnodes", "2", "p"}).find("one node"), std::string::npos);
}

TEST(LaunchOptions, OwnFlags) {
  LaunchOptions o = parse_ok({"--log-dir", "/tmp/x", "--grace-s=0.5", "--rdzv-timeout-s", "7", "p"});
  EXPECT_EQ(o.log_dir, "/tmp/x");
  EXPECT_EQ(o.grace_s, 0.5);
  EXPECT_EQ(o.rdzv_timeout_s, 7);
  EXPECT_EQ(parse_launch_options({"p"}, 42).value().rdzv_timeout_s, 42);  // from the environment
}

TEST(LaunchOptions, AcceptedTorchrunFlags) {
  LaunchOptions o = parse_ok({"--role", "trainer", "--rdzv-conf", "timeout=9", "--no-python", "p"});
  EXPECT_EQ(o.program, std::vector<std::string>{"p"});
}

TEST(LaunchOptions, RestartsAndMonitorInterval) {
  LaunchOptions o = parse_ok({"p"});
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_EQ(o.monitor_interval_s, 0.25);
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--max-restarts", "3", "--monitor-interval", "5", "p"},
           {"--max_restarts=3", "--monitor_interval=5", "p"},
           {"--max-restarts=3", "--monitor-interval", "5.0", "p"}}) {
    o = parse_ok(args);
    EXPECT_EQ(o.max_restarts, 3);
    EXPECT_EQ(o.monitor_interval_s, 5);
    EXPECT_EQ(o.program, std::vector<std::string>{"p"});
  }
  o = parse_ok({"--nnodes", "2:2", "--max-restarts", "1", "--monitor-interval", "0.1", "p"});
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.max_restarts, 1);
  EXPECT_EQ(o.monitor_interval_s, 0.1);
  EXPECT_EQ(parse_ok({"--max-restarts", "0", "p"}).max_restarts, 0);
  // Restarts go with --standalone and with several nodes alike.
  EXPECT_EQ(parse_ok({"--standalone", "--max-restarts", "2", "p"}).max_restarts, 2);
}

TEST(LaunchOptions, BadRestartsAndMonitorInterval) {
  EXPECT_NE(parse_error({"--max-restarts", "-1", "p"}).find("--max-restarts '-1' must be an integer in [0, "),
            std::string::npos);
  EXPECT_NE(parse_error({"--max-restarts", "two", "p"}).find("--max-restarts 'two'"), std::string::npos);
  EXPECT_NE(parse_error({"--max-restarts", "99999999", "p"}).find("--max-restarts"), std::string::npos);
  EXPECT_NE(parse_error({"--max-restarts"}).find("needs a value"), std::string::npos);
  EXPECT_NE(parse_error({"--monitor-interval", "0", "p"}).find("--monitor-interval '0' must be a positive number"),
            std::string::npos);
  EXPECT_NE(parse_error({"--monitor-interval", "-2", "p"}).find("positive"), std::string::npos);
  EXPECT_NE(parse_error({"--monitor-interval", "inf", "p"}).find("positive"), std::string::npos);
  EXPECT_NE(parse_error({"--monitor-interval", "5s", "p"}).find("'5s'"), std::string::npos);
}

// --nnodes MIN:MAX and what --rdzv-conf sets for it, as torchrun takes them.
TEST(LaunchOptions, ElasticNodeCounts) {
  LaunchOptions o = parse_ok({"--nnodes", "1:4", "p"});
  EXPECT_EQ(o.min_nnodes, 1);
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.last_call_s, 30);  // torchrun's defaults
  EXPECT_EQ(o.keep_alive_interval_s, 5);
  EXPECT_EQ(o.keep_alive_max_attempt, 3);
  o = parse_ok({"--nnodes=2:2", "p"});
  EXPECT_EQ(o.min_nnodes, 2);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_FALSE(o.elastic());
  o = parse_ok({"--nnodes", "3", "p"});
  EXPECT_EQ(o.min_nnodes, 3);
  EXPECT_FALSE(o.elastic());
  o = parse_ok({"--nnodes", "1:2", "--rdzv_conf",
                "last_call_timeout=0.5,keep_alive_interval=0.25,keep_alive_max_attempt=4,join_timeout=9,is_host=1", "p"});
  EXPECT_EQ(o.last_call_s, 0.5);
  EXPECT_EQ(o.keep_alive_interval_s, 0.25);
  EXPECT_EQ(o.keep_alive_max_attempt, 4);
  EXPECT_EQ(o.rdzv_timeout_s, 9);  // join_timeout
  // --rdzv-timeout-s wins over join_timeout, in either order.
  EXPECT_EQ(parse_ok({"--rdzv-timeout-s", "3", "--rdzv-conf", "join_timeout=9", "p"}).rdzv_timeout_s, 3);
  EXPECT_EQ(parse_ok({"--rdzv-conf", "join_timeout=9", "--rdzv-timeout-s", "3", "p"}).rdzv_timeout_s, 3);
  EXPECT_EQ(parse_ok({"--rdzv-conf", "last_call_timeout=0", "p"}).last_call_s, 0);
}

TEST(LaunchOptions, BadElasticNodeCounts) {
  EXPECT_NE(parse_error({"--nnodes", "3:2", "p"}).find("--nnodes 3:2: MIN is larger than MAX"), std::string::npos);
  EXPECT_NE(parse_error({"--nnodes", "0:2", "p"}).find("--nnodes '0' must be an integer in [1, "), std::string::npos);
  EXPECT_NE(parse_error({"--nnodes", "1:", "p"}).find("--nnodes ''"), std::string::npos);
  EXPECT_NE(parse_error({"--nnodes", ":2", "p"}).find("--nnodes ''"), std::string::npos);
  EXPECT_NE(parse_error({"--nnodes", "1:x", "p"}).find("--nnodes 'x'"), std::string::npos);
  // Ranks of nodes are given anew each round: a fixed --node-rank has no meaning there.
  std::string e = parse_error({"--nnodes", "1:2", "--node-rank", "0", "p"});
  EXPECT_NE(e.find("--node-rank with --nnodes 1:2"), std::string::npos) << e;
  EXPECT_NE(parse_error({"--standalone", "--nnodes", "1:2", "p"}).find("one node"), std::string::npos);
  EXPECT_NE(parse_error({"--rdzv-conf", "last_call_timeout=soon", "p"}).find("last_call_timeout 'soon'"),
            std::string::npos);
  EXPECT_NE(parse_error({"--rdzv-conf", "keep_alive_interval=0", "p"}).find("positive"), std::string::npos);
  EXPECT_NE(parse_error({"--rdzv-conf", "keep_alive_max_attempt=0", "p"}).find("keep_alive_max_attempt"),
            std::string::npos);
  EXPECT_NE(parse_error({"--rdzv-conf", "last_call_timeout", "p"}).find("is not key=value"), std::string::npos);
}

TEST(LaunchOptions, HelpDocumentsRestarts) {
  const std::string help = launch_usage();
  EXPECT_NE(help.find("--max-restarts N"), std::string::npos);
  EXPECT_NE(help.find("--monitor-interval S"), std::string::npos);
  EXPECT_NE(help.find("TORCHELASTIC_RESTART_COUNT"), std::string::npos);
  EXPECT_EQ(help.find("not supported yet"), std::string::npos);
}

TEST(LaunchOptions, Errors) {
  EXPECT_NE(parse_error({"--nproc-per-node", "0", "p"}).find("--nproc-per-node"), std::string::npos);
  EXPECT_NE(parse_error({"--nproc-per-node", "x", "p"}).find("'x'"), std::string::npos);
  EXPECT_NE(parse_error({"--nproc-per-node"}).find("needs a value"), std::string::npos);
  EXPECT_NE(parse_error({"--bogus", "p"}).find("unknown flag '--bogus'"), std::string::npos);
  EXPECT_NE(parse_error({"--standalone=1", "p"}).find("takes no value"), std::string::npos);
  EXPECT_NE(parse_error({"--rdzv-backend", "etcd", "p"}).find("needs --rdzv-endpoint"), std::string::npos);
  EXPECT_NE(parse_error({"--rdzv-backend", "static", "p"}).find("use c10d"), std::string::npos);
  EXPECT_NE(parse_error({"--nnodes", "2", "--node-rank", "2", "p"}).find("out of range"), std::string::npos);
  EXPECT_NE(parse_error({"--master-port", "70000", "p"}).find("--master-port"), std::string::npos);
  EXPECT_NE(parse_error({"--grace-s", "-1", "p"}).find("--grace-s"), std::string::npos);
  EXPECT_NE(parse_error({"--rdzv-timeout-s", "0", "p"}).find("positive"), std::string::npos);
  EXPECT_NE(parse_error({"-m", "pkg", "p"}).find("Python"), std::string::npos);
  EXPECT_NE(parse_error({"--nproc-per-node", "2"}).find("no program"), std::string::npos);
  EXPECT_NE(parse_error({"--"}).find("no program"), std::string::npos);
}

TEST(LaunchOptions, EtcdBackendTakesTheMembersList) {
  // The endpoint may come before the backend, as torchrun lines are written either way.
  LaunchOptions o = parse_ok({"--rdzv-endpoint", "h1:2379,h2:2380,[::1]", "--rdzv-backend", "etcd", "--nnodes", "2", "p"});
  EXPECT_EQ(o.rdzv_backend, LaunchOptions::RdzvBackend::etcd);
  EXPECT_EQ(o.etcd_endpoints, "h1:2379,h2:2380,[::1]");
  EXPECT_EQ(o.endpoint_host, "h1");
  o = parse_ok({"--rdzv_backend=etcd-v2", "--rdzv_endpoint=h1", "p"});
  EXPECT_EQ(o.rdzv_backend, LaunchOptions::RdzvBackend::etcd);
  EXPECT_EQ(parse_ok({"p"}).rdzv_backend, LaunchOptions::RdzvBackend::c10d);
  EXPECT_NE(parse_error({"--rdzv-backend", "etcd", "--rdzv-endpoint", "h1:2379,:5", "p"}).find("no host"),
            std::string::npos);
  EXPECT_NE(parse_error({"--rdzv-backend", "etcd", "--standalone", "p"}).find("--standalone"), std::string::npos);
}

// etcd takes a range of node counts: each round's leader, not node 0, serves what the ranks use.
TEST(LaunchOptions, EtcdTakesARangeOfNodeCounts) {
  LaunchOptions o = parse_ok({"--rdzv-backend", "etcd", "--rdzv-endpoint", "h1:2379", "--nnodes", "1:2", "p"});
  EXPECT_TRUE(o.elastic());
  EXPECT_EQ(o.min_nnodes, 1);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.rdzv_backend, LaunchOptions::RdzvBackend::etcd);
  EXPECT_EQ(parse_ok({"--rdzv-backend", "etcd", "--rdzv-endpoint", "h1", "--nnodes", "2:2", "p"}).nnodes, 2);
  EXPECT_NE(launch_usage().find("each round has a leader, the lowest node id among its members"), std::string::npos);
}

TEST(LaunchOptions, Help) {
  EXPECT_TRUE(parse_ok({"--help"}).help);
  EXPECT_TRUE(parse_ok({"-h"}).help);
  EXPECT_NE(launch_usage().find("--nproc-per-node"), std::string::npos);
}

// --version needs no program; after the program it is the program's flag, not braidrun's.
TEST(LaunchOptions, Version) {
  EXPECT_TRUE(parse_ok({"--version"}).version);
  EXPECT_TRUE(parse_ok({"--nproc-per-node", "2", "--version", "./prog"}).version);
  LaunchOptions o = parse_ok({"./prog", "--version"});
  EXPECT_FALSE(o.version);
  EXPECT_EQ(o.program, (std::vector<std::string>{"./prog", "--version"}));
  EXPECT_NE(parse_error({"--version=1"}).find("takes no value"), std::string::npos);
}

}  // namespace
}  // namespace braid::braidrun

namespace braid::braidrun {
namespace {

TEST(LaunchOptions, CpuBind) {
  auto d = parse_launch_options({"./p"}, 300);
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(d->cpu_bind);
  auto n = parse_launch_options({"--cpu-bind", "none", "./p"}, 300);
  ASSERT_TRUE(n.is_ok());
  EXPECT_FALSE(n->cpu_bind);
  auto bad = parse_launch_options({"--cpu-bind=cores", "./p"}, 300);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--cpu-bind must be auto or none"), std::string::npos);
}

TEST(CpuShare, EqualContiguousSharesOrNoneWhenOversubscribed) {
  std::vector<int> cpus = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(cpu_share(cpus, 0, 2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(cpu_share(cpus, 1, 2), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(cpu_share(cpus, 2, 3), (std::vector<int>{4, 5}));  // 8 / 3 = 2 each; CPUs 6-7 left free
  EXPECT_EQ(cpu_share({2, 5}, 1, 2), (std::vector<int>{5}));
  EXPECT_TRUE(cpu_share({0, 1}, 0, 4).empty());
  EXPECT_TRUE(cpu_share({}, 0, 1).empty());
}

}  // namespace
}  // namespace braid::braidrun
