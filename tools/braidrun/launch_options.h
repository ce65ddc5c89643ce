// tools/braidrun/launch_options.h - braidrun's command line, parsed as a pure function.
//
// braidrun takes torchrun's flags as users paste them (both --nproc-per-node and
// --nproc_per_node, "--flag=value" and "--flag value") followed by the program and its
// arguments, optionally after "--". Parsing stops at the first argument that is not a flag, as
// torchrun's does, so the program's own flags are never taken for braidrun's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace braid::braidrun {

struct LaunchOptions {
  int nproc_per_node = 1;
  // --nnodes MIN:MAX (or N, which is N:N): a round starts with MIN..MAX nodes. `nnodes` is MAX.
  int nnodes = 1;
  int min_nnodes = 1;
  // A range of node counts: rounds form as torchrun's c10d rendezvous forms them (node_rendezvous.h).
  bool elastic() const { return min_nnodes < nnodes; }
  std::optional<int> node_rank;  // unset: the serving node is 0, the others come in arrival order
  // Where the job's store lives: --rdzv-endpoint, else --master-addr:--master-port.
  std::string endpoint_host = "127.0.0.1";
  uint16_t endpoint_port = 29500;
  bool standalone = false;  // one node, store on a free port of 127.0.0.1
  // --rdzv-backend: c10d (a braidrun serves the job's store) or etcd (the nodes meet in an etcd
  // v3 cluster, whose members --rdzv-endpoint lists: "h1:p1,h2:p2,h3:p3").
  enum class RdzvBackend { c10d, etcd };
  RdzvBackend rdzv_backend = RdzvBackend::c10d;
  std::string etcd_endpoints;  // --rdzv-endpoint as given, with --rdzv-backend etcd
  std::string run_id = "none";
  bool prefix_output = true;
  std::string log_dir;  // empty: no per-rank log files
  double grace_s = 5;
  // --max-restarts: how many times the job may start every rank again after a failure.
  int max_restarts = 0;
  // --monitor-interval: how often, while ranks run, braidrun asks the job's store whether
  // another node failed (its own ranks' exits it sees at once).
  double monitor_interval_s = 0.25;
  // --cpu-bind auto|none: with auto, when the node has at least one CPU per local rank, each
  // rank gets its own share of the CPUs braidrun may use (as Open MPI binds by default).
  bool cpu_bind = true;
  double rdzv_timeout_s = 300;
  // From --rdzv-conf (torchrun's names). last_call_timeout: once MIN nodes are in a round, how
  // long it waits for more (up to MAX) before it starts. keep_alive_interval x
  // keep_alive_max_attempt: how long a node's heartbeat may stand still before the others
  // take it for lost (with --nnodes MIN:MAX).
  double last_call_s = 30;
  double keep_alive_interval_s = 5;
  int keep_alive_max_attempt = 3;
  std::optional<double> join_timeout_s;  // --rdzv-conf join_timeout: rdzv_timeout_s, unless given
  bool help = false;
  bool version = false;
  std::vector<std::string> program;  // program and its arguments; empty only with help or version
};

// Parses argv without argv[0]. `default_rdzv_timeout_s` comes from BRAID_RENDEZVOUS_TIMEOUT_S.
// Errors are invalid_argument with a message fit to print after "braidrun: ".
Result<LaunchOptions> parse_launch_options(const std::vector<std::string>& args, double default_rdzv_timeout_s);

// The text --help prints.
std::string launch_usage();

}  // namespace braid::braidrun
