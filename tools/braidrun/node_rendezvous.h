// tools/braidrun/node_rendezvous.h - braidruns on several nodes forming one job.
//
// One braidrun serves the job's store (TcpStoreServer) on the endpoint: node rank 0, or with
// --node-rank omitted, the one that can bind the endpoint's port on a local address. Every
// braidrun (the serving one included) is a client of it. Its keys live under
// "braidrun/<run id>/", apart from the ranks' keys:
//   node/<r>       "<hostname>\n<pid>\n<nproc-per-node>": node r arrived (compare_set, so a node
//                  rank is taken once)
//   next_node      counter handing out node ranks 1.. in arrival order (ranks omitted)
//   failed         "<exit code>\n<what failed>": the first failure; every node stops its ranks
//   heartbeat/<r>  counter node r bumps while its ranks run
//   done/<r>       node r's exit code, set once its ranks ended
// The serving braidrun keeps the store up until every node is done (or stopped beating), so
// ranks finishing late can still use it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "braid/store.h"
#include "common/status.h"
#include "tools/braidrun/launch_options.h"
#include "tools/braidrun/supervisor.h"

namespace braid::braidrun {

// Who may use the job's store: braidrun's store server and its own client use these.
struct StoreAuth {
  std::optional<std::string> secret;  // unset: braidrun's own BRAID_SECRET(_FILE), if any
  std::string job_id;                 // empty: unknown
};

class NodeRendezvous {
 public:
  // Serves or connects, takes a node rank and waits (up to --rdzv-timeout-s) for all nodes.
  // SIGINT/SIGTERM on `signal_fd` abort the wait (ErrorCode::aborted; `*stop_signal` is set).
  static Result<std::unique_ptr<NodeRendezvous>> join(const LaunchOptions& options, const StoreAuth& auth,
                                                       int signal_fd, int* stop_signal);
  ~NodeRendezvous();

  int node_rank() const { return node_rank_; }
  bool serving() const { return server_ != nullptr; }
  // What ranks get as MASTER_ADDR / MASTER_PORT.
  const std::string& master_addr() const { return master_addr_; }
  uint16_t master_port() const { return master_port_; }

  // Called every supervisor tick: bumps this node's heartbeat and returns a stop request once
  // any node reported a failure (or the store is gone).
  std::optional<ExternalStop> poll_job();
  // Records how this node ended; on the serving node, then waits for the others to be done
  // (bounded by their heartbeats and by SIGINT/SIGTERM). Returns the exit code braidrun should
  // end with: this node's, or the first non-zero one reported by another node.
  int finish(const JobOutcome& outcome, int signal_fd);

 private:
  NodeRendezvous() = default;
  Status aborted_by(int sig);
  Status serve_or_connect(const LaunchOptions& o, const StoreAuth& auth, int signal_fd);
  Status take_node_rank(const LaunchOptions& o);
  Status wait_for_nodes(const LaunchOptions& o, int signal_fd);
  std::string key(const std::string& k) const { return prefix_ + k; }
  // One store call that SIGINT/SIGTERM can end and that says what it waits for (store_wait.h).
  // `f` gets the store and must capture only copies: it may outlive the call.
  template <typename T>
  Result<T> ask(const std::string& what, const std::string& waiting_for, std::function<T(TcpStore&)> f);

  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<TcpStore> store_;  // shared: a call left behind on a signal keeps it alive
  int signal_fd_ = -1;
  std::string prefix_;
  std::string master_addr_;
  uint16_t master_port_ = 0;
  int node_rank_ = 0;
  int nnodes_ = 1;
  double grace_s_ = 5;
  unsigned ticks_ = 0;
  struct PendingPoll {  // poll_job()'s question in flight
    std::atomic<bool> done{false};
    Status status;
    std::optional<ExternalStop> stop;
  };
  std::shared_ptr<PendingPoll> poll_;
  int* stop_signal_ = nullptr;
};

// Reads pending signals from `signal_fd`; returns SIGINT or SIGTERM if one came (SIGCHLD is
// dropped: no rank runs while this is used).
std::optional<int> take_stop_signal(int signal_fd);

}  // namespace braid::braidrun
