// tools/braidrun/node_rendezvous.h - braidruns on several nodes forming one job, round by round.
//
// One braidrun serves the job's store (TcpStoreServer) on the endpoint: node rank 0, or with
// --node-rank omitted, the one that can bind the endpoint's port on a local address. Every
// braidrun (the serving one included) is a client of it. Its keys live under
// "braidrun/<run id>/", apart from the ranks' keys:
//   node/<r>       "<hostname>\n<pid>\n<nproc-per-node>\n<max restarts>": node r arrived
//                  (compare_set, so a node rank is taken once)
//   next_node      counter handing out node ranks 1.. in arrival order (ranks omitted)
//   heartbeat/<r>  counter node r bumps while its ranks run and while it waits for the others
//   left/<r>       node r's braidrun is about to exit
// and, for each round R (0 for the first start of the ranks, one more per restart):
//   round/<R>/node/<r>     node r reached round R                         (with --max-restarts)
//   round/<R>/store        the port of round R's own store for the ranks  (with --max-restarts)
//   round/<R>/failed       "<exit code>\n<restart|stop>\n<what failed>": the round's first
//                          failure; every node stops its ranks when it appears
//   round/<R>/failure/<r>  node r's failed rank, for the summary: "rank 3 (local rank 1 on node
//                          1, host h): exit code 5"
//   round/<R>/done/<r>     node r's exit code, set once its ranks of round R ended
//   round/<R>/torch_port   MASTER_PORT of round R, which node 0 keeps free for rank 0's torch store
// Without --max-restarts the ranks use this store (BRAID_STORE_PORT is the endpoint's port).
// With it, each round's ranks get a store of their own, served by the serving braidrun on a free
// port of the same address under the job id "<job id>/round<R>": a process left over from an
// earlier round knows neither the new port nor the new job id, and a store refuses a client of
// another job id, so it can neither join a later round nor write into its keys (the store it
// knew is closed when its round ends). The serving braidrun keeps the store up until every node
// left (or stopped beating), so ranks finishing late can still use it.
// MASTER_PORT is never braid's store: torch's env:// (any backend) makes rank 0 serve torch's
// own store there, as under torchrun's c10d rendezvous. Node 0, where rank 0 runs, keeps a free
// port for it each round (port_reservation.h); braid's store reaches the ranks as
// BRAID_STORE_PORT, at the same MASTER_ADDR.
// With --rdzv-backend etcd the same keys live in an etcd v3 cluster (EtcdStore; --rdzv-endpoint
// lists its members) and no braidrun serves the job's store, so no node's loss takes the
// rendezvous with it. Node ranks come from next_node (0.. in arrival order) unless given. With
// a fixed --nnodes N and --node-rank (or one node), node 0 plays the serving node's part for the
// ranks: it writes
//   master_addr    node 0's address on its route to etcd: the ranks' MASTER_ADDR
// before its node/0 and opens each round's store for the ranks (round/<R>/store, also without
// --max-restarts). Otherwise the rounds form as elastic rounds (below; a fixed --nnodes N as
// N:N, as torchrun's rendezvous does, so a lost node's replacement joins the next round under a
// new node id), and each round has a leader instead: the lowest node id among its members
// (GROUP_RANK 0, so rank 0 runs there). Once the round closed, the leader serves the round's
// store for the ranks and keeps its MASTER_PORT, on its own address towards etcd, and writes
//   round/<R>/leader   "<address>\n<store port>\n<MASTER_PORT>\n<restarts so far>"
// which the other members wait for (a leader whose heartbeat stands still meanwhile is lost:
// the round fails before it starts, and the next one forms without it). Nothing after round 0
// needs node 0. When a node's braidrun is done with the job's keys (its summary printed) it
// writes
//   gone/<r>           node r reads nothing more; "lost" when another node found it lost
// and the node that finds every other node id gone removes the job's keys from etcd (a job
// that did not end cleanly leaves them; a new --rdzv-id avoids them).
// With c10d, the other nodes' braidruns end the job when the serving node's store is gone, and
// say that it was that node's and that --rdzv-backend etcd outlives it.
//
// With --nnodes MIN:MAX (elastic), rounds form as torchrun's c10d rendezvous forms them, and a
// node's rank in the job ("node id": 0 for the serving node, then next_node in arrival order,
// never reused) is not its rank in a round (GROUP_RANK: its place among the round's node ids,
// sorted). Every round has a store of its own for the ranks, as with --max-restarts. More keys:
//   round_at              the newest round node 0 (etcd: any node) opened: where a node arriving
//                         late looks first
//   round/<R>/state       "open:<id>,<id>,..." while round R takes nodes, then "closed:<ids>":
//                         its members. Node 0 opens it (so rank 0 is always at MASTER_ADDR);
//                         every change is a compare_set of the whole value. A member closes it
//                         when MAX joined, or last_call_timeout after it saw MIN joined
//   round/<R>/waiting     counter: nodes that found round R closed without them wait for R+1;
//                         while R runs with fewer than MAX nodes, a member seeing it ends R
//                         ("rejoin" in round/<R>/failed: a membership change, not a restart)
//   round/<R>/restarts    restarts spent before round R, as node 0 counts them: every member
//                         takes it up (TORCHELASTIC_RESTART_COUNT), a node that joined late too
//   ended                 a member of the latest round it formed ended the job (it left): nodes
//                         forming a round give up (a node left out of a round ends nothing)
// A node whose heartbeat stood still for keep_alive_interval x keep_alive_max_attempt while its
// round ran is lost: a member that sees it writes round/<R>/failed (a failure, counted as a
// restart) and round/<R>/failure/<id>, and the next round forms without it. Below MIN nodes,
// the round never starts: forming it ends at --rdzv-timeout-s with the missing nodes named.
// Only the Store's calls are used (set, get, add, check, compare_set), so EtcdStore holds these
// keys too; there no node serves the store, so the first node to look opens a round (once the
// previous round failed: a node waiting for a running round must not open the next alone),
// round_at is the newest round any node opened, and round/<R>/restarts is replaced by the
// leader's record.
//
// node_rendezvous.cc joins the job; node_rounds.cc runs the rounds; elastic_rounds.cc forms an
// elastic round.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "braid/store.h"
#include "common/deadline.h"
#include "common/status.h"
#include "tools/braidrun/etcd_http.h"
#include "tools/braidrun/launch_options.h"
#include "tools/braidrun/port_reservation.h"
#include "tools/braidrun/store_wait.h"
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
  // Serves the ranks' store: the node that serves the job's store (c10d), or node 0 (etcd).
  bool serving() const { return serving_; }
  // What ranks get as MASTER_ADDR / MASTER_PORT.
  const std::string& master_addr() const { return master_addr_; }
  uint16_t master_port() const { return master_port_; }

  // Every node meets for the next round (0 first, then one more per restart or membership
  // change), bounded by --rdzv-timeout-s and SIGINT/SIGTERM; with --max-restarts or --nnodes
  // MIN:MAX the serving node first opens the round's store for the ranks (and closes the
  // previous round's). With MIN:MAX, a node arriving late starts at the newest round.
  Status meet_round();
  int round() const { return round_; }
  // Failures restarted from so far: TORCHELASTIC_RESTART_COUNT (membership changes not counted).
  int restart_count() const { return restart_count_; }
  // This node's rank among the round's nodes (GROUP_RANK), and how many there are.
  int group_rank() const { return group_rank_; }
  int group_world_size() const { return static_cast<int>(members_.size()); }
  // The node id of the round's GROUP_RANK 0 (with etcd and MIN:MAX, the round's leader).
  int round_leader() const { return members_.empty() ? 0 : members_.front(); }
  // Rounds form as with --nnodes MIN:MAX (elastic_rounds.cc): with a range, and with etcd for a
  // fixed --nnodes N without --node-rank (N:N, as torchrun: a lost node's replacement joins the
  // next round under a new node id).
  bool elastic() const { return formed_rounds_; }
  // What this round's ranks get as BRAID_STORE_PORT and BRAID_JOB_ID ("" for BRAID_JOB_ID:
  // leave it), and as MASTER_PORT (free for rank 0's torch store).
  uint16_t ranks_port() const { return ranks_port_; }
  uint16_t torch_port() const { return torch_port_; }
  const std::string& ranks_job_id() const { return ranks_job_id_; }

  // Called every supervisor tick: bumps this node's heartbeat and returns a stop request once
  // any node reported a failure in this round (or the store is gone). `beat_only`: this node's
  // ranks are already being stopped; only the heartbeat matters (it records nothing, so that
  // this node's own failure, reported once its ranks ended, is the round's).
  std::optional<ExternalStop> poll_job(bool beat_only = false);

  // How the round ended for this node: start every rank again, or exit with `exit_code`.
  struct RoundEnd {
    bool restart = false;
    bool rejoin = false;  // restart for a membership change: not counted as a restart
    int exit_code = 0;
  };
  // Records how this node's ranks ended in this round. With --max-restarts, waits for the
  // round's outcome on every node, and returns restart when restarts are left and the failure
  // allows one (a rank failed, anywhere). Otherwise the job ends: the serving node waits for
  // the others to leave (bounded by their heartbeats and by SIGINT/SIGTERM), and the exit code
  // is this node's, or that of a failure on another node. Every wait is bounded.
  RoundEnd end_round(const JobOutcome& outcome);
  // Records that this node's braidrun ends the job (best effort): the serving node waits for
  // every other node's, and a node waiting to start the next round stops waiting for this one.
  void leave();
  // Every failure of every round so far, one line each ("round 0: rank 3 (local rank 1 on node
  // 1, host h): exit code 5"), read from the store, or what this node saw when it is gone.
  std::vector<std::string> failure_summary();

 private:
  NodeRendezvous() = default;
  std::string round_key(const std::string& k) const { return key("round/" + std::to_string(round_) + "/" + k); }
  Status start_round_store();
  // Fixed --nnodes: waits for every node in round round_.
  Status meet_fixed_round();
  // --nnodes MIN:MAX: forms round round_ (or a later one, when this node arrives too late for
  // it; `first`: this node's first round, which it finds from round_at): members_, group_rank_
  // and the round's store (elastic_rounds.cc).
  Status form_elastic_round(bool first);
  // etcd, elastic: the round's leader (its lowest node id, GROUP_RANK 0) serves the round's store
  // for the ranks, keeps its MASTER_PORT and records both with its address and the restarts so
  // far (round/<R>/leader); the others wait for that record. `failed`: the round failed before
  // it started (its leader lost); `rejoin`: it ended for a membership change meanwhile.
  enum class RoundLead { started, failed, rejoin };
  Result<RoundLead> settle_round_leader();
  // "node 1 (host h, braidrun pid 7), node 3 (...)" from their node/<id> keys.
  std::string describe_nodes(const std::vector<int>& ids);
  // The nodes of the round agree on --nproc-per-node and --max-restarts.
  Status check_members_agree();
  // Elastic: records that node `n` of this round is lost (round/<R>/failed, failure/<n>).
  Status report_lost(int n, double silent_s);
  // Node 0 keeps a free port for this round's torch store and tells the others (torch_port_).
  Status share_torch_port();
  // After this node's report: waits until the round failed somewhere (`restart` when that
  // failure allows one; the exit code is this node's, else the failure's) or every node's ranks
  // ended well (the round succeeded).
  RoundEnd wait_round_outcome(int code);
  // The serving node: waits for the other nodes to leave; returns the job's exit code.
  int wait_for_others_to_leave(int code);
  // Bumps this node's heartbeat when a second has passed since the last time.
  void beat(Store& store);
  // Whether this node's heartbeat is due (beat_every_ passed since the last); when it is, the
  // caller bumps it in its next store call, and the next beat is counted from now.
  bool beat_due();
  Status report_stop(int code, const std::string& why);
  Status aborted_by(int sig);
  Status serve_or_connect(const LaunchOptions& o, const StoreAuth& auth, int signal_fd);
  // --rdzv-backend etcd: reaches a member of the cluster (up to --rdzv-timeout-s).
  Status connect_etcd(const LaunchOptions& o);
  // A failed call to the job's store, with what it means when it is the c10d store of another
  // node that went away: the job cannot outlive that node, and etcd would have let it.
  Status explain_store_loss(const Status& s);
  // etcd: records that this node is gone (gone/<r>) and, when every other node is too, removes
  // the job's keys (best effort).
  void forget_job();
  Status take_node_rank(const LaunchOptions& o);
  // etcd, node 0: serves the ranks' stores on its address towards etcd and records it.
  Status announce_node0_address();
  Status wait_for_nodes(const LaunchOptions& o, int signal_fd);
  std::string key(const std::string& k) const { return prefix_ + k; }
  // One store call that SIGINT/SIGTERM can end and that says what it waits for (store_wait.h).
  // `f` gets the store and must capture only copies: it may outlive the call.
  template <typename T>
  Result<T> ask(const std::string& what, const std::string& waiting_for, std::function<T(Store&)> f);

  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStoreServer> round_server_;  // this round's store for the ranks (--max-restarts)
  std::shared_ptr<Store> store_;  // shared: a call left behind on a signal keeps it alive
  bool serving_ = false;
  bool etcd_ = false;         // --rdzv-backend etcd: store_ is an EtcdStore
  bool registered_ = false;   // this node's node/<r> is its own
  std::vector<etcd::Endpoint> etcd_members_;
  std::string store_node_;    // c10d: which node serves the job's store, for messages
  bool told_store_lost_ = false;
  int signal_fd_ = -1;
  std::string prefix_;
  std::string master_addr_;
  uint16_t master_port_ = 0;
  int node_rank_ = 0;
  int nnodes_ = 1;  // MAX of --nnodes MIN:MAX
  int min_nnodes_ = 1;
  bool formed_rounds_ = false;  // elastic()
  double last_call_s_ = 30;
  std::chrono::milliseconds beat_every_{1000};
  // Elastic: a node whose heartbeat stood still this long is lost.
  std::chrono::milliseconds lost_after_{15000};
  int nproc_per_node_ = 1;
  int restart_count_ = 0;
  bool met_once_ = false;
  std::vector<int> members_;  // node ids of this round, sorted (fixed: 0..nnodes-1)
  int group_rank_ = 0;
  // Elastic: the other members' heartbeats as the last poll saw them, and since when; used by
  // one poll thread at a time, and by the main thread only between them.
  struct PeerBeat {
    int64_t beats = -1;
    Clock::time_point changed{};
  };
  std::shared_ptr<std::map<int, PeerBeat>> peer_beats_;
  double grace_s_ = 5;
  double monitor_interval_s_ = 0.25;
  double rdzv_timeout_s_ = 300;
  int max_restarts_ = 0;
  int round_ = 0;
  std::string run_id_;
  StoreAuth auth_;
  std::string serve_host_;  // where the serving node's store listens
  uint16_t ranks_port_ = 0;
  uint16_t torch_port_ = 0;
  std::unique_ptr<PortReservation> torch_port_hold_;  // node 0: held for the round
  std::string ranks_job_id_;
  Clock::time_point last_beat_{};
  // Failures this node reported or saw, per round: the summary when the store is gone.
  std::map<int, std::vector<std::string>> seen_failures_;
  struct PendingPoll {  // poll_job()'s question in flight
    std::atomic<bool> done{false};
    Status status;
    std::optional<ExternalStop> stop;
  };
  std::shared_ptr<PendingPoll> poll_;
  int* stop_signal_ = nullptr;
};

template <typename T>
Result<T> NodeRendezvous::ask(const std::string& what, const std::string& waiting_for, std::function<T(Store&)> f) {
  auto out = std::make_shared<T>();
  Status s = wait_for_store(
      StoreWaitOptions{.signal_fd = signal_fd_}, waiting_for,
      [store = store_, out, f = std::move(f), what] { return store_call(what, [&] { *out = f(*store); }); },
      stop_signal_);
  if (!s.is_ok()) return explain_store_loss(s);
  return *out;
}

// True when `failed_value`, a round/<R>/failed value, records a membership change ("rejoin"),
// not a failure.
bool is_rejoin_record(const std::string& failed_value);

// Reads pending signals from `signal_fd`; returns SIGINT or SIGTERM if one came (SIGCHLD is
// dropped: no rank runs while this is used).
std::optional<int> take_stop_signal(int signal_fd);

}  // namespace braid::braidrun
